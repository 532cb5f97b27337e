package reentrant

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/hashslot"
)

// notifier delivers handoff messages to the waiting Lock calls of one
// Client. A release that hands a lock to one of its waiters publishes
// "<level ID> <token>" on a channel the client listens on, and only that
// waiter wakes.
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

	done chan struct{} // closed by close

	mu      sync.Mutex
	ps      *redis.PubSub      // the classic channel's current subscription
	waiters map[string]*waiter // by level ID
	running bool               // the classic dispatcher was started
	closed  bool
}

const (
	// listenTick is how long a subscription waits for a message before it
	// pings its server; a second tick without a reply subscribes anew.
	listenTick = time.Second
	// listenBackoff bounds the wait between two attempts to subscribe.
	listenBackoffMin, listenBackoffMax = 10 * time.Millisecond, time.Second
)

// waiter is one Lock call that may wait.
type waiter struct {
	n       *notifier
	level   string
	channel string        // where its handoff is published
	slot    int           // the slot of its shard channel; -1: the classic channel
	wake    chan struct{} // receives on a handoff message or a (re)subscription
	handed  atomic.Uint64 // the token a handoff message gave this waiter; 0 if none
}

func newNotifier(rdb redis.UniversalClient, prefix, id string, spawn func(func()) bool) *notifier {
	n := &notifier{rdb: rdb, channel: prefix + ":c:" + id, waiters: make(map[string]*waiter), spawn: spawn, done: make(chan struct{})}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		n.shards = newShards(n, cc, prefix, id)
	}
	return n
}

// register fills w (storage the caller keeps, zero) as the waiter for
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
	w.n, w.level, w.channel, w.slot, w.wake = n, level, n.channel, slot, make(chan struct{}, 1)
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

// run keeps the classic channel subscribed until the client closes: it
// subscribes, dispatches messages until the subscription ends (see
// receive), and subscribes anew after a backoff. It reads the connection
// itself rather than through go-redis's Channel, whose reader and health
// check add two goroutine wakeups to every handoff message.
func (n *notifier) run() {
	ctx := context.Background()
	b := backoff{next: listenBackoffMin, max: listenBackoffMax}
	for {
		// Subscribe dials and writes within go-redis's own timeouts; a
		// failure shows in receive.
		ps := n.rdb.Subscribe(ctx, n.channel)
		if !n.attach(ps) {
			_ = ps.Close()
			return
		}
		confirmed, _ := n.receive(ps, -1, nil)
		_ = ps.Close()
		if !n.attach(nil) {
			return
		}
		// Whatever is published until the next confirmation is lost; that
		// confirmation wakes the waiters to poll.
		if confirmed {
			b.next = listenBackoffMin
		}
		if !sleep(n.done, b.delay()) {
			return
		}
	}
}

// attach records ps as the classic channel's subscription (nil between
// two), and reports false when the client has closed.
func (n *notifier) attach(ps *redis.PubSub) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.ps = ps
	return true
}

// receive dispatches ps's messages until the subscription ends: ps was
// closed, the server ended it, its connection failed or stayed silent for
// a tick after a ping, or idle (nil for none), asked after each silent
// tick, reported true. Each confirmation of the subscription wakes the
// waiters of slot (-1: the classic channel's) to poll. It reports whether
// the server confirmed the subscription, and whether it ended idle.
//
// It reads on the caller's goroutine, without a deadline (setting one per
// message costs a timer update); a watchdog goroutine, which only reads a
// counter of messages, pings a silent subscription and closes it when the
// ping goes unanswered.
func (n *notifier) receive(ps *redis.PubSub, slot int, idle func() bool) (confirmed, wasIdle bool) {
	subscribe, unsubscribe := "subscribe", "unsubscribe"
	if slot >= 0 {
		subscribe, unsubscribe = "ssubscribe", "sunsubscribe"
	}
	var heard atomic.Uint64 // replies read, pongs included
	var ended atomic.Bool   // closed by the watchdog as idle
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { watch(ps, &heard, &ended, idle, stop) })
	defer wg.Wait()
	defer close(stop)
	ctx := context.Background()
	for {
		m, err := ps.Receive(ctx)
		if err != nil {
			return confirmed, ended.Load()
		}
		heard.Add(1)
		switch m := m.(type) {
		case *redis.Message:
			n.deliver(m.Payload)
		case *redis.Subscription:
			switch m.Kind {
			case subscribe:
				confirmed = true
				n.poke(slot)
			case unsubscribe:
				return confirmed, false
			}
		}
	}
}

// watch closes ps, which receive reads, when a tick passes without a reply
// after a tick without one made it ping, or when idle (if not nil) reports
// true after a silent tick (then it sets ended first). It returns when stop
// is closed.
func watch(ps *redis.PubSub, heard *atomic.Uint64, ended *atomic.Bool, idle func() bool, stop <-chan struct{}) {
	t := time.NewTicker(listenTick)
	defer t.Stop()
	last, pinged := heard.Load(), false
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if h := heard.Load(); h != last {
			last, pinged = h, false
			continue
		}
		if idle != nil && idle() {
			ended.Store(true)
			_ = ps.Close()
			return
		}
		if pinged || ps.Ping(context.Background()) != nil {
			_ = ps.Close()
			return
		}
		pinged = true
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

// deliver hands a message "<level ID> <token>" to its waiter, if it is
// still there.
func (n *notifier) deliver(payload string) {
	level, tok, _ := strings.Cut(payload, " ")
	n.mu.Lock()
	defer n.mu.Unlock()
	if w := n.waiters[level]; w != nil {
		if t, err := fence.Parse(tok); err == nil && t != fence.None {
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
	close(n.done)
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
