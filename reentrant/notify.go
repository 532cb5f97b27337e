package reentrant

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// notifier multiplexes every waiting Lock of a Client over one pub/sub
// connection, so a thousand waiters cost one connection, not a thousand.
type notifier struct {
	rdb redis.UniversalClient

	mu     sync.Mutex
	ps     *redis.PubSub
	chans  map[string]*chanState
	done   chan struct{} // closed when the dispatcher exits
	closed bool
}

type chanState struct {
	waiters map[*waiter]struct{}
	// pending counts SUBSCRIBEs sent whose confirmation has not arrived.
	// Only when it drops to zero while subscribed is the subscription known
	// to be active: an earlier SUBSCRIBE's confirmation may still be in
	// flight behind an UNSUBSCRIBE.
	pending    int
	subscribed bool
	ready      chan struct{}
}

// waiter is one Lock call waiting on a channel.
type waiter struct {
	n     *notifier
	ch    string
	ready <-chan struct{} // closed once the subscription is active
	wake  chan struct{}   // receives when a release or resubscription happens
}

func newNotifier(rdb redis.UniversalClient) *notifier {
	return &notifier{rdb: rdb, chans: make(map[string]*chanState)}
}

// watch registers a waiter on channel ch, subscribing if needed.
func (n *notifier) watch(ctx context.Context, ch string) (*waiter, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	if n.ps == nil {
		n.ps = n.rdb.Subscribe(context.WithoutCancel(ctx))
		n.done = make(chan struct{})
		go n.dispatch(n.ps.ChannelWithSubscriptions(redis.WithChannelSize(256)))
	}
	st := n.chans[ch]
	if st == nil {
		st = &chanState{waiters: make(map[*waiter]struct{})}
		n.chans[ch] = st
	}
	if !st.subscribed {
		if err := n.ps.Subscribe(ctx, ch); err != nil {
			if len(st.waiters) == 0 && st.pending == 0 {
				delete(n.chans, ch)
			}
			return nil, err
		}
		st.subscribed, st.ready = true, make(chan struct{})
		st.pending++
	}
	w := &waiter{n: n, ch: ch, ready: st.ready, wake: make(chan struct{}, 1)}
	st.waiters[w] = struct{}{}
	return w, nil
}

// stop unregisters w and unsubscribes when it was the channel's last waiter.
func (w *waiter) stop() {
	n := w.n
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.chans[w.ch]
	if st == nil {
		return
	}
	delete(st.waiters, w)
	if len(st.waiters) > 0 || n.closed {
		return
	}
	if st.subscribed {
		// An error here means the connection is broken; go-redis will not
		// resubscribe a channel it was told to drop, so there is nothing to undo.
		_ = n.ps.Unsubscribe(context.Background(), w.ch)
		st.subscribed = false
	}
	if st.pending == 0 {
		delete(n.chans, w.ch)
	}
}

func (n *notifier) dispatch(msgs <-chan any) {
	defer close(n.done)
	for m := range msgs {
		var ch string
		switch m := m.(type) {
		case *redis.Message:
			ch = m.Channel
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			ch = m.Channel
		default:
			continue
		}
		n.mu.Lock()
		if st := n.chans[ch]; st != nil {
			if _, confirm := m.(*redis.Subscription); confirm {
				// A confirmation also arrives after go-redis reconnects and
				// resubscribes; a release may have been missed meanwhile, so
				// waking the waiters to retry is right either way.
				if st.pending > 0 {
					st.pending--
				}
				if st.pending == 0 && st.subscribed {
					select {
					case <-st.ready:
					default:
						close(st.ready)
					}
				}
				if !st.subscribed && st.pending == 0 && len(st.waiters) == 0 {
					delete(n.chans, ch)
				}
			}
			for w := range st.waiters {
				select {
				case w.wake <- struct{}{}:
				default:
				}
			}
		}
		n.mu.Unlock()
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
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-done
	return err
}
