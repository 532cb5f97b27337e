package reentrant

// Redlock's wait: attempts after a random delay, and at once when a node
// says the lock was released there.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/scripts"
)

// lock is Lock on a Redlock: attempts until one acquires, ctx ends or the
// retry strategy gives up. After a refused attempt the waiter listens on
// the lock's wake channel on every node (see wakes) and tries again when a
// release is published there, or after the poll delay, whichever is first.
// A woken attempt does not count as a poll of the retry strategy.
//
// Waiting on a Redlock is not fair: there is no queue, every waiter of a
// name wakes on a release, and the first whose attempt reaches a majority
// takes the lock; simultaneous attempts that split the nodes all fail and
// back off at random. docs/deployments.md says what that means for users.
func (q *quorum) lock(ctx context.Context, r *call) (*Lease, error) {
	c := q.c
	if !c.track() {
		return nil, ErrClosed
	}
	defer c.wg.Done()
	l, a, err := r.try(ctx, false)
	switch {
	case l != nil:
		return l, err
	case err != nil && (!retryable(err) || ctx.Err() != nil):
		return nil, err
	}
	last := err // the last attempt's, when too few nodes answered
	wake := make(chan struct{}, 1)
	channel := wakeChannel(quorumOf(r).keys)
	for _, w := range q.wakes {
		w.add(channel, wake)
	}
	defer func() {
		for _, w := range q.wakes {
			w.remove(channel, wake)
		}
	}()
	polls, splits := 1, 0
	d := q.pollDelay(r, polls, a.holderTTL)
	if d <= 0 {
		return nil, gaveUpAfter(fmt.Sprintf("gave up after %d attempts (%v)", polls, r.cfg.retry), last)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	var soon <-chan time.Time // a woken or split waiter's short random delay
	if a.split {
		splits++
		soon = time.After(spread(splits))
	}
	for {
		poll := false
		select {
		case <-ctx.Done():
			return nil, gaveUpAfter("", join(ctx.Err(), last))
		case <-c.bg.Done():
			return nil, ErrClosed
		case <-wake:
			// Every waiter of the name woke with this one: trying at once
			// they would split the nodes between them.
			if soon == nil {
				soon = time.After(spread(1))
			}
			continue
		case <-soon:
		case <-t.C:
			poll = true
			polls++
		}
		soon = nil
		l, a, err = r.try(ctx, true)
		switch {
		case l != nil:
			return l, err
		case err != nil && (!retryable(err) || ctx.Err() != nil):
			return nil, err
		}
		last = err
		if a.split {
			splits++
			soon = time.After(spread(splits))
		} else {
			splits = 0
		}
		if poll {
			if d = q.pollDelay(r, polls, a.holderTTL); d <= 0 {
				return nil, gaveUpAfter(fmt.Sprintf("gave up after %d attempts (%v)", polls, r.cfg.retry), last)
			}
			t.Reset(d)
		}
	}
}

// retryable reports whether a waiting Redlock Lock tries again after an
// attempt that failed with err (while its context lasts): the lock was
// held, or the nodes' answers came too late to tell and what the attempt
// may have taken is being undone; a later attempt takes a level of its
// own.
func retryable(err error) bool {
	return errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrOutcomeUnknown)
}

// gaveUpAfter is the error of a waiting Redlock Lock that gave up (why)
// after attempts whose last failed with last: ErrOutcomeUnknown when that
// one's outcome was unknown (its undo goes on in the background), and
// ErrNotAcquired otherwise.
func gaveUpAfter(why string, last error) error {
	if errors.Is(last, ErrOutcomeUnknown) {
		if why == "" {
			return last
		}
		return fmt.Errorf("%s: %w", why, last)
	}
	if why == "" {
		return join(ErrNotAcquired, last)
	}
	return join(fmt.Errorf("%w: %s", ErrNotAcquired, why), last)
}

// wakeSpread is the longest random delay before a woken Redlock waiter's
// attempt, doubled after each split attempt in a row (up to 16 times): the
// waiters a release woke together then try one after another, and the
// first takes every node before the next arrives.
const wakeSpread = 2 * time.Millisecond

// spread is the random delay after the n-th wake or split in a row.
func spread(n int) time.Duration {
	return rand.N(wakeSpread << min(n-1, 4))
}

// pollDelay is how long a Redlock waiter sleeps before attempt n+1: the
// retry strategy's backoff, or a random delay up to the holder's TTL,
// bounded by the client's maximum retry delay.
func (q *quorum) pollDelay(r *call, n int, holderTTL time.Duration) time.Duration {
	if r.cfg.retry != nil {
		return r.cfg.retry.Backoff(n)
	}
	d := q.c.cfg.maxRetryDelay
	if holderTTL > 0 && holderTTL < d {
		d = holderTTL
	}
	return time.Millisecond + rand.N(max(d, time.Millisecond))
}

// wakeChannel is the channel on which a node announces that the lock of k
// was released there.
func wakeChannel(k scripts.Keys) string { return k.Lock + ":w" }

// published announces that the lock of k was forced free (ForceUnlock), in
// the background, on got's first node that confirmed it (ok), which has
// just answered: every waiter listens on every node, so one message
// reaches them all. A waiter that misses it (its connection to that node
// is down) tries again after its poll delay. Unlock needs none: each
// node's release script publishes when it frees the lock
// (scripts.ReleaseWaking).
func published[T any](q *quorum, k scripts.Keys, got []*nodeReply[T], ok func(nodeReply[T]) bool) {
	i := slices.IndexFunc(got, func(x *nodeReply[T]) bool { return x != nil && ok(*x) })
	if i < 0 {
		return
	}
	rdb, c := q.nodes[i], q.c
	c.goBackground(func() {
		ctx, cancel := context.WithTimeout(c.bg, c.cfg.lease.ttl)
		defer cancel()
		if err := rdb.Publish(ctx, wakeChannel(k), "").Err(); err != nil {
			c.debug("reentrant: Redlock release not published; waiters poll", "name", k.Name, "node", i, "err", err)
		}
	})
}

// wakes is one node's pub/sub connection of a Redlock client: it listens
// on the wake channels of the names this client's Lock calls wait for, and
// when a message, or the confirmation of a subscription (a release may have
// come before it), arrives, wakes the call of that name that has waited
// longest: at most one call of a client can take the lock, and the others
// waking too would only cost the nodes their refusals. A woken call that
// leaves without the lock passes its wake on. The connection is opened
// by the first waiter and kept until Close; channels are subscribed and
// unsubscribed in the background, one batch at a time, so that a node that
// does not answer delays no waiter.
type wakes struct {
	c   *Client
	rdb redis.UniversalClient

	mu      sync.Mutex
	ps      *redis.PubSub
	waiters map[string][]chan struct{} // by channel, longest waiting first
	on      map[string]bool            // the channels subscribed, or being
	syncing bool                       // a sync goroutine runs
	closed  bool
}

func newWakes(c *Client, rdb redis.UniversalClient) *wakes {
	return &wakes{c: c, rdb: rdb, waiters: map[string][]chan struct{}{}, on: map[string]bool{}}
}

// add makes wake receive the releases published on channel.
func (w *wakes) add(channel string, wake chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if w.ps == nil {
		ps := w.rdb.Subscribe(w.c.bg) // no channel yet: nothing is sent
		msgs := ps.ChannelWithSubscriptions()
		if !w.c.goBackground(func() { w.dispatch(msgs) }) {
			_ = ps.Close()
			return
		}
		w.ps = ps
	}
	w.waiters[channel] = append(w.waiters[channel], wake)
	w.sync()
}

// remove undoes add. A wake that is pending on wake goes to the next
// waiter of channel, if there is one.
func (w *wakes) remove(channel string, wake chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	list := w.waiters[channel]
	i := slices.Index(list, wake)
	if i < 0 {
		return
	}
	list = slices.Delete(list, i, i+1)
	if len(list) == 0 {
		delete(w.waiters, channel)
		w.sync()
		return
	}
	w.waiters[channel] = list
	select {
	case <-wake:
		w.wakeFirst(channel)
	default:
	}
}

// wakeFirst wakes the longest waiting call of channel. Called with w.mu
// held.
func (w *wakes) wakeFirst(channel string) {
	if list := w.waiters[channel]; len(list) > 0 {
		select {
		case list[0] <- struct{}{}:
		default: // a wake is pending already
		}
	}
}

// sync starts, unless one runs, the goroutine that brings the connection's
// subscriptions in line with the waiters. Called with w.mu held.
func (w *wakes) sync() {
	if w.syncing || w.closed {
		return
	}
	w.syncing = w.c.goBackground(func() {
		for {
			w.mu.Lock()
			var sub, unsub []string
			for ch := range w.waiters {
				if !w.on[ch] {
					w.on[ch] = true
					sub = append(sub, ch)
				}
			}
			for ch := range w.on {
				if w.waiters[ch] == nil {
					delete(w.on, ch)
					unsub = append(unsub, ch)
				}
			}
			if w.closed || len(sub)+len(unsub) == 0 {
				w.syncing = false
				w.mu.Unlock()
				return
			}
			ps := w.ps
			w.mu.Unlock()
			// go-redis records the channels before it sends the command and
			// subscribes them again after a reconnect, so a failure here is
			// made good by the connection's next reconnect.
			ctx, cancel := context.WithTimeout(w.c.bg, time.Second)
			if len(sub) > 0 {
				_ = ps.Subscribe(ctx, sub...)
			}
			if len(unsub) > 0 {
				_ = ps.Unsubscribe(ctx, unsub...)
			}
			cancel()
		}
	})
}

// dispatch wakes the longest waiting call of each message's channel until
// the connection is closed.
func (w *wakes) dispatch(msgs <-chan any) {
	for m := range msgs {
		var channel string
		switch m := m.(type) {
		case *redis.Message:
			channel = m.Channel
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			channel = m.Channel
		default:
			continue
		}
		w.mu.Lock()
		w.wakeFirst(channel)
		w.mu.Unlock()
	}
}

// close closes the connection; dispatch then returns.
func (w *wakes) close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.ps == nil {
		return nil
	}
	return w.ps.Close()
}
