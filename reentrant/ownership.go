package reentrant

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redfence/redfence/fence"
)

// ownership is this process's record of one ownership of one lock: the
// leases that share its token, the local timer that decides loss, and what
// the client's renewer needs to keep it alive. It ends (ctx cancelled) when
// the lock is released or lost, when the Client closes, or when every lease
// of it in this process has been unlocked; renewal stops then.
type ownership struct {
	c      *Client
	key    holdKey
	ref    lockRef
	token  fence.Token
	cfg    *leaseConfig // the lease of the call that started the ownership
	refs   int          // live leases; guarded by c.mu
	ctx    context.Context
	cancel context.CancelCauseFunc

	lost atomic.Bool // lose ran: a loss is reported once, whoever finds it first

	mu       sync.Mutex
	early    *time.Timer // the first renewal of a short window, if it has its own timer
	deadline time.Time   // sent time of the last confirmation + TTL - margin
	timer    *time.Timer // fires at deadline
	lastErr  error       // the last renewal's error, for the loss's cause

	// entry is o's index in c.ren's schedule, -1 when not registered;
	// guarded by c.ren.mu.
	entry int

	// ext is the renewal's request, made at the first renewal (a lock
	// released sooner never makes it) and kept, with what the backend
	// prepared for it, for every later one; only the renewal in flight, of
	// which the schedule allows one, touches it.
	ext extendReq
}

// newOwnership starts the local timer, which ends the ownership at sent +
// window unless a renewal moves it, and, when on, hands the ownership to
// the client's renewer. A window shorter than the TTL less the margin (a
// lock taken from a handoff message, whose lease is the claim time) gets its
// first renewal at half of it, on a timer of its own: the renewer's tick
// may be longer than the window. Called with c.mu held and c not closed.
func (c *Client) newOwnership(key holdKey, ref lockRef, tok fence.Token, cfg *leaseConfig, sent time.Time, window time.Duration) *ownership {
	ctx, cancel := context.WithCancelCause(context.Background())
	o := &ownership{c: c, key: key, ref: ref, token: tok, cfg: cfg, ctx: ctx, cancel: cancel,
		deadline: sent.Add(window), entry: -1}
	// The timer, not a Redis reply, decides loss: go-redis's timeouts and
	// retries can hold a renewal call far past the lease.
	// The timers are set under o.mu: one may fire, and end o, at once.
	o.mu.Lock()
	defer o.mu.Unlock()
	o.timer = time.AfterFunc(time.Until(o.deadline), o.expire)
	if cfg.renew > 0 {
		first := min(cfg.renew, window/2)
		c.ren.add(o, sent.Add(first))
		if first < cfg.renew {
			o.early = time.AfterFunc(time.Until(sent.Add(first)), func() { c.ren.renewNow(o) })
		}
	}
	return o
}

// end ends the ownership with cause, and with it every lease of it, and
// stops its timers; the renewer drops it at its next tick. Every end of an
// ownership goes through here.
func (o *ownership) end(cause error) {
	o.cancel(cause)
	if o.cfg.renew > 0 {
		o.c.ren.drop(o)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.timer.Stop()
	if o.early != nil {
		o.early.Stop()
	}
}

// lose ends the ownership because the lock is gone, forgets it, and
// reports it.
func (o *ownership) lose(cause error) {
	if o.ctx.Err() != nil || !o.lost.CompareAndSwap(false, true) {
		return
	}
	o.end(cause)
	o.c.forget(o)
	o.reportLost(cause)
}

// forget removes o from the client's ownerships, if it is still there.
func (c *Client) forget(o *ownership) {
	c.mu.Lock()
	if c.owns[o.key] == o {
		delete(c.owns, o.key)
		n := holdKey{name: o.key.name, kind: o.key.kind}
		if c.names[n]--; c.names[n] == 0 {
			delete(c.names, n)
		}
	}
	c.mu.Unlock()
}

// heldHere reports whether this client holds name for an owner other than
// owner: a lock call of owner then waits on a hold of its own process,
// most often its caller's earlier Lock whose lease's Context it did not
// pass.
func (c *Client) heldHere(name string, kind byte, owner Owner) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.names[holdKey{name: name, kind: kind}]
	if _, own := c.owns[holdKey{owner, name, kind}]; own {
		n--
	}
	return n > 0
}

// reportLost logs a loss and tells the observer; never called with c.mu
// held, so a slow logger or observer holds up no other call.
func (o *ownership) reportLost(cause error) {
	o.c.cfg.log.Warn("reentrant: lease lost", "name", o.key.name, "token", uint64(o.token), "cause", cause)
	o.c.emit(Event{Kind: kindLost, Name: o.key.name, Hold: holdNames[o.key.kind], Token: o.token, Err: cause})
}

// lostErr is the cause a loss of o of kind (ErrGone or ErrUnconfirmed) for
// reason ends its leases with; err, if not nil, is the error that revealed
// it, kept in the chain.
func (o *ownership) lostErr(kind error, reason string, err error) error {
	if err != nil {
		return opErr("lease", o.key.name, fmt.Errorf("%w: token %d: %s: %w", kind, o.token, reason, err))
	}
	return opErr("lease", o.key.name, fmt.Errorf("%w: token %d: %s", kind, o.token, reason))
}

// confirm records that Redis extended the lease to at least ttl from sent
// (a renewal, an Extend, a reentry): the local deadline moves to
// sent + ttl - margin, never back.
func (o *ownership) confirm(sent time.Time, ttl time.Duration) {
	d := sent.Add(ttl - o.cfg.margin - o.cfg.drift)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ctx.Err() != nil || !d.After(o.deadline) {
		return
	}
	o.deadline = d
	o.timer.Reset(time.Until(d))
}

// overdue returns the loss o's timer will end it with when its local
// deadline has passed, and sets the timer to fire now (after a pause the
// caller may run before the timer's goroutine); nil before the deadline.
// The loss itself, its log line and its event, stay the timer's: a caller
// of Err runs no logger or observer.
func (o *ownership) overdue() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if time.Now().Before(o.deadline) {
		return nil
	}
	o.timer.Reset(0)
	return o.expiredErr(o.lastErr)
}

// expiredErr is the cause of a loss by the local deadline; last is the
// last renewal's error, if any.
func (o *ownership) expiredErr(last error) error {
	reason := fmt.Sprintf("the TTL less the %v safety margin passed", o.cfg.margin)
	if o.cfg.renew == 0 {
		reason += " with renewal off (WithoutRenewal; Extend renews)"
	}
	if last != nil {
		reason += "; last renewal"
	}
	return o.lostErr(ErrUnconfirmed, reason, last)
}

// expire ends the ownership when its deadline has passed; a timer that
// fired just before a confirmation moved the deadline is re-armed.
func (o *ownership) expire() {
	o.mu.Lock()
	left := time.Until(o.deadline)
	if left > 0 {
		o.timer.Reset(left)
		o.mu.Unlock()
		return
	}
	err := o.lastErr
	o.mu.Unlock()
	o.lose(o.expiredErr(err))
}

// dropRef forgets one lease of o once that lease has ended; the last one
// ends o, and the renewer drops it at its next tick. When the lock is still held in Redis at that point
// (its other levels belong to the same owner elsewhere), it expires after at
// most one TTL unless renewed there.
func (c *Client) dropRef(o *ownership) {
	c.mu.Lock()
	o.refs--
	last := o.refs == 0
	c.mu.Unlock()
	if last {
		o.end(ErrReleased)
		c.forget(o)
	}
}
