package reentrant

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/hashslot"
)

// notifier delivers handoff messages to the waiting Lock calls of one
// Client. A release that hands a lock to one of its waiters publishes
// "<level ID> <token>" (a semaphore's permit: "<level ID> <token> <slot>")
// on a channel the client listens on, and only that waiter wakes.
//
// On a standalone server (and on a Cluster without sharded pub/sub) the
// client listens on one classic channel of its own, P:c:<client ID>,
// subscribed by the first Lock that has to wait and kept until Close. On
// a Cluster of Redis 7 it listens on one shard channel per slot it has
// waiters in (see shards), so that a release publishes to the lock's shard
// alone.
//
// A message published while no subscription is active is lost; waiters
// poll (see Client.pollDelay), and every confirmation of a subscription
// (the first, and each after a reconnect or a move) wakes the waiters it
// serves to poll at once, so a lost message delays a handoff, never loses
// it.
type notifier struct {
	rdb     redis.UniversalClient
	channel string  // the classic channel
	shards  *shards // nil unless rdb is a *redis.ClusterClient

	// spawn runs a goroutine counted among the client's (Client.goBackground),
	// so that Close waits for the dispatchers; false once the client closed.
	spawn func(func()) bool

	mu      sync.Mutex
	ps      *redis.PubSub
	waiters map[string]*waiter // by level ID
	running bool               // the classic dispatcher was started
	closed  bool
}

// waiter is one Lock call that may wait.
type waiter struct {
	n       *notifier
	level   string
	channel string        // where its handoff is published
	slot    int           // the slot of its shard channel; -1: the classic channel
	wake    chan struct{} // receives on a handoff message or a (re)subscription
	handed  atomic.Uint64 // the token a handoff message gave this waiter; 0 if none
	// handedSlot is the slot plus one of the permit a handoff message
	// gave this waiter (a semaphore's); 0 if none. Stored before handed.
	handedSlot atomic.Int64
}

func newNotifier(rdb redis.UniversalClient, prefix, id string, spawn func(func()) bool) *notifier {
	n := &notifier{rdb: rdb, channel: prefix + ":c:" + id, waiters: make(map[string]*waiter), spawn: spawn}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		n.shards = newShards(n, cc, prefix, id)
	}
	return n
}

// register fills w (storage the caller keeps, zero but maybe its wake
// channel, which several waiters of one LockMulti share) as the waiter for
// level, which waits for the lock whose hash is lockKey, and picks its
// channel: on a Cluster with sharded pub/sub, the
// shard channel of lockKey's slot. The first call on a Cluster asks the
// server once whether it has SPUBLISH. Register before the request that
// may queue, so that a message sent right after it finds the waiter.
func (n *notifier) register(ctx context.Context, lockKey, level string, w *waiter) (*waiter, error) {
	slot := -1
	if n.shards != nil && n.shards.on(ctx) {
		slot = hashslot.Of(lockKey)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	w.n, w.level, w.channel, w.slot = n, level, n.channel, slot
	if slot >= 0 {
		w.channel = n.shards.ref(slot)
	}
	n.waiters[level] = w
	return w, nil
}

// listen makes sure w's channel is subscribed: the first call starts the
// subscription in the background. Each confirmation wakes the waiters it
// serves.
func (n *notifier) listen(w *waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	w.channelMade()
	if n.closed {
		return
	}
	if w.slot >= 0 {
		n.shards.listen(w.slot)
		return
	}
	if n.running {
		return
	}
	n.running = n.spawn(n.run)
}

func (n *notifier) run() {
	// Subscribe dials and writes within go-redis's own timeouts, and keeps
	// the channel to re-subscribe with even when this first attempt fails.
	ps := n.rdb.Subscribe(context.Background(), n.channel)
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		_ = ps.Close()
		return
	}
	n.ps = ps
	n.mu.Unlock()
	for m := range ps.ChannelWithSubscriptions(redis.WithChannelSize(256)) {
		switch m := m.(type) {
		case *redis.Message:
			n.deliver(m.Payload)
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				n.poke(-1)
			}
		}
	}
}

// channelMade makes w's wake channel, when it has none yet, under its
// notifier's mutex: a Lock that takes the lock at its first attempt, the
// common case, never needs one, and a message that comes before the call
// listens finds it made.
func (w *waiter) channelMade() {
	if w.wake == nil {
		w.wake = make(chan struct{}, 1)
	}
}

// stop unregisters w.
func (w *waiter) stop() {
	n := w.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.waiters[w.level] != w {
		return
	}
	delete(n.waiters, w.level)
	if w.slot >= 0 {
		n.shards.unref(w.slot)
	}
}

// deliver hands a message "<level ID> <token>", or a permit's "<level ID>
// <token> <slot>", to its waiter, if it is still there.
func (n *notifier) deliver(payload string) {
	level, tok, _ := strings.Cut(payload, " ")
	tok, slot, _ := strings.Cut(tok, " ")
	n.mu.Lock()
	defer n.mu.Unlock()
	if w := n.waiters[level]; w != nil {
		if t, err := fence.Parse(tok); err == nil && t != fence.None {
			s, err := strconv.ParseInt(slot, 10, 32)
			if err != nil || s < 0 {
				s = -1 // none: a permit is then claimed in Redis
			}
			w.handedSlot.Store(s + 1)
			w.handed.Store(uint64(t))
		}
		w.poke()
	}
}

// poke wakes every waiter on the classic channel (slot -1) or on the
// shard channel of slot, to poll.
func (n *notifier) poke(slot int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, w := range n.waiters {
		if w.slot == slot {
			w.poke()
		}
	}
}

func (w *waiter) poke() {
	w.channelMade()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (n *notifier) close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	ps := n.ps
	n.mu.Unlock()
	var err error
	if ps != nil {
		err = ps.Close() // the dispatcher returns; Client.Close waits for it
	}
	if n.shards != nil {
		n.shards.close()
	}
	return err
}
