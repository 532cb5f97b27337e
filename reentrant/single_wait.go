package reentrant

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
)

// lock waits in the lock's queue: registered with the notifier before its
// first attempt, it is woken by the handoff a release publishes, and polls
// for a holder that died or a handoff never claimed.
func (s *single) lock(ctx context.Context, r *call) (*Lease, error) {
	c, name, sc := s.c, r.name, singleOf(r)
	var first time.Duration // the strategy's first backoff, asked once
	if s := r.cfg.retry; s != nil {
		first = s.Backoff(1)
	}
	if s := r.cfg.retry; s != nil && first <= 0 {
		l, _, err := r.try(ctx, false)
		if err == nil && l == nil {
			err = fmt.Errorf("%w: held by another owner or others wait for it (%v)", ErrNotAcquired, s)
		}
		return l, err
	}
	// Registered before the first request, so that a handoff published
	// right after it finds this waiter.
	w, err := s.note.register(ctx, sc.keys.Lock, r.level, &sc.wait)
	if err != nil {
		return nil, err
	}
	defer w.stop()
	// A handed lock waits at most half the handoff timeout to be claimed,
	// and never longer than a lease would have lasted.
	sc.waiter = scripts.Waiter{Channel: w.channel, Sharded: w.slot >= 0,
		Claim: min(c.cfg.handoff/2, r.cfg.ttl), Queue: 2*r.cfg.ttl + c.cfg.handoff}
	// A Lock is work of the client's: Close ends its wait and waits for it,
	// so that nothing of a closed client sends another command.
	if !c.track() {
		return nil, ErrClosed
	}
	defer c.wg.Done()
	queued := time.Now() // no handoff to this waiter can come before
	l, a, err := r.try(ctx, false)
	if err = r.keepWaiting(ctx, err); err != nil || l != nil {
		return l, err
	}
	// The first attempt may have queued the call: every later one also
	// leaves the queue when it takes or reenters the lock.
	sc.again = true
	s.note.listen(w)
	polls := 1
	delay := first
	if r.cfg.retry == nil {
		delay = r.pollDelay(polls, a.holderTTL)
	}
	// Whatever the strategy, the waiter polls at least every quarter of the
	// queue's expiry, which each poll renews, so that it keeps its place
	// even when a poll is late.
	keep := sc.waiter.Queue / 4
	pollAt := time.Now().Add(delay)
	timer := time.NewTimer(min(delay, keep))
	defer timer.Stop()
	for {
		poll, keepAlive := false, false
		select {
		case <-w.wake:
			if tok := fence.Token(w.handed.Swap(0)); tok != fence.None {
				slot := int(w.handedSlot.Swap(0)) - 1
				if l, ok, err := r.takeHanded(ctx, tok, slot, queued); ok {
					return l, err
				}
			}
		case <-timer.C:
			poll = true
			if keepAlive = time.Now().Before(pollAt); !keepAlive {
				polls++
			}
		case <-ctx.Done():
			// Leave the queue, and give the lock on if it was just handed
			// here: the undo takes this waiter's level and queue entry.
			return nil, gaveUp("", r.undo(), ctx.Err())
		case <-c.bg.Done():
			return nil, join(ErrClosed, r.leave())
		}
		l, a, err = r.try(ctx, poll)
		if err = r.keepWaiting(ctx, err); err != nil || l != nil {
			return l, err // errors already classified, with any undo's outcome
		}
		switch {
		case keepAlive:
			timer.Reset(min(time.Until(pollAt), keep))
		case poll:
			c.debug("reentrant: lock still held, polling again", "name", name, "polls", polls)
			if delay = r.pollDelay(polls, a.holderTTL); delay <= 0 {
				return nil, gaveUp(fmt.Sprintf("gave up after %d polls (%v)", polls-1, r.cfg.retry), r.undo())
			}
			pollAt = time.Now().Add(delay)
			timer.Reset(min(delay, keep)) // no stale tick survives a Reset since Go 1.23
		}
	}
}

// takeHanded accepts the lock that a release handed to this waiter, as the
// handoff message says (token tok; a permit's slot, or -1), without
// claiming it in Redis first.
// The handoff gave a lease of the claim time from the instant it happened,
// which came after queued (when the request that queued this waiter was
// sent), so the lease holds until queued + claim on this process's clock,
// less a safety margin in the same proportion to the claim as the call's
// margin to its TTL; the renewer extends it to the TTL before then (see
// newOwnership). ok is false when the claim must be made in Redis instead:
// with WithReplicaAck (the claim's WAIT covers the handoff), without
// renewal (the lease must last the TTL from the start), for a semaphore's
// permit whose message did not say its slot (one from an earlier
// version's release; the claim's reply says it), or when the message came
// too late to leave half of that window.
func (r *call) takeHanded(ctx context.Context, tok fence.Token, slot int, queued time.Time) (l *Lease, ok bool, err error) {
	if r.c.cfg.ackReplicas > 0 || r.cfg.renew == 0 || r.hold.kind == 's' && slot < 0 {
		return nil, false, nil
	}
	claim := singleOf(r).waiter.Claim
	window := claim - time.Duration(float64(claim)*float64(r.cfg.margin)/float64(r.cfg.ttl))
	if time.Until(queued.Add(window)) < window/2 {
		return nil, false, nil
	}
	l, err = r.c.newLease(ctx, r, acquired{ok: true, token: tok, depth: 1, sent: queued, window: window, slot: slot})
	return l, true, err
}

// pollDelay is how long a waiter sleeps before its n-th poll when no
// handoff message wakes it; zero or less means give up. With the call's
// retry strategy, the strategy's delay. By default, a quarter of the
// handoff timeout, or until the holder's lease runs out if that is sooner,
// at most maxRetryDelay, plus jitter. Polling is what hands on a lock whose
// holder died or whose handoff was never claimed.
func (r *call) pollDelay(n int, holderTTL time.Duration) time.Duration {
	if r.cfg.retry != nil {
		return r.cfg.retry.Backoff(n)
	}
	c := r.c
	d := min(c.cfg.handoff/4, c.cfg.maxRetryDelay)
	if holderTTL >= 0 && holderTTL < d {
		d = holderTTL
	}
	if c.cfg.jitter > 0 {
		d += rand.N(c.cfg.jitter)
	}
	return max(d, 1) // a holder's lease just ending is no reason to give up
}
