package reentrant

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
)

// notifier delivers handoff messages to the waiting Lock calls of one
// Client. The client listens on one channel of its own, whatever the number
// of locks and waiters: a release that hands a lock to one of its waiters
// publishes "<level ID> <token>" there, and only that waiter wakes.
//
// The subscription is made by the first Lock that has to wait and kept
// until Close. A message published while no subscription is active is lost;
// waiters poll (see Client.pollDelay), and every confirmation of the
// subscription (the first, and each after go-redis reconnects) wakes every
// waiter to poll at once, so a lost message delays a handoff, never loses it.
type notifier struct {
	rdb     redis.UniversalClient
	channel string

	mu      sync.Mutex
	ps      *redis.PubSub
	waiters map[string]*waiter // by level ID
	done    chan struct{}      // closed when the dispatcher exits
	closed  bool
}

// waiter is one Lock call that may wait.
type waiter struct {
	n      *notifier
	level  string
	wake   chan struct{} // receives on a handoff message or a (re)subscription
	handed atomic.Uint64 // the token a handoff message gave this waiter; 0 if none
}

func newNotifier(rdb redis.UniversalClient, channel string) *notifier {
	return &notifier{rdb: rdb, channel: channel, waiters: make(map[string]*waiter)}
}

// register makes a waiter for level; it sends nothing. Register before the
// request that may queue, so that a message sent right after it finds the
// waiter.
func (n *notifier) register(level string) (*waiter, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	w := &waiter{n: n, level: level, wake: make(chan struct{}, 1)}
	n.waiters[level] = w
	return w, nil
}

// listen makes sure the client's channel is subscribed: the first call
// starts the subscription in the background (go-redis re-subscribes after
// a reconnect on its own). Each confirmation wakes every waiter.
func (n *notifier) listen() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.done != nil {
		return
	}
	n.done = make(chan struct{})
	go n.run()
}

func (n *notifier) run() {
	defer close(n.done)
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
	n.dispatch(ps.ChannelWithSubscriptions(redis.WithChannelSize(256)))
}

// stop unregisters w.
func (w *waiter) stop() {
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	if w.n.waiters[w.level] == w {
		delete(w.n.waiters, w.level)
	}
}

func (n *notifier) dispatch(msgs <-chan any) {
	for m := range msgs {
		n.mu.Lock()
		switch m := m.(type) {
		case *redis.Message:
			level, tok, _ := strings.Cut(m.Payload, " ")
			if w := n.waiters[level]; w != nil {
				if t, err := fence.Parse(tok); err == nil && t != fence.None {
					w.handed.Store(uint64(t))
				}
				w.poke()
			}
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				for _, w := range n.waiters {
					w.poke()
				}
			}
		}
		n.mu.Unlock()
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
	ps, done := n.ps, n.done
	n.mu.Unlock()
	var err error
	if ps != nil {
		err = ps.Close()
	}
	if done != nil {
		<-done
	}
	return err
}
