package reentrant

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redfence/redfence/fence"
)

// cleanupBudget bounds how long a lock call goes on after its context ended,
// or after it failed with an outcome it cannot know (the reply was lost, the
// read timed out): half of it waiting for the Redis call in flight, half
// undoing what that call may have done. What is still unfinished then goes
// on in the background, and Close waits for it.
const cleanupBudget = 200 * time.Millisecond

// TryLock locks name for ctx's owner, or reenters it, if it can do so
// without waiting; it never jumps the queue of waiting Lock calls. A context
// without an owner gets a fresh one; opts override the client's defaults.
//
// It fails with ErrNotAcquired when another owner holds the lock or others
// wait for it (its message says when this Client holds it for another
// owner), and otherwise as Lock does.
func (c *Client) TryLock(ctx context.Context, name string, opts ...CallOption) (*Lease, error) {
	if err := c.valid(); err != nil {
		return nil, opErr("trylock", name, err)
	}
	start := time.Now()
	l, err := c.tryLock(ctx, name, lockHold, opts)
	err = opErr("trylock", name, err)
	c.observed(name, lockHold, start, l, err)
	return l, err
}

func (c *Client) tryLock(ctx context.Context, name string, h hold, opts []CallOption) (*Lease, error) {
	r, err := c.newCall(ctx, name, h, opts)
	if err != nil {
		return nil, err
	}
	l, _, err := r.try(ctx, false)
	if err == nil && l == nil {
		switch {
		case h.kind == 'r':
			err = fmt.Errorf("%w: a writer holds it or waits for it", ErrNotAcquired)
		case h.kind == 's':
			err = fmt.Errorf("%w: all %d permits are held, or others wait for one", ErrNotAcquired, h.permits)
		case r.c.heldHere(name, h.kind, r.owner):
			err = fmt.Errorf("%w: %s", ErrNotAcquired, heldHereHint)
		default:
			err = fmt.Errorf("%w: held by another owner or others wait for it", ErrNotAcquired)
		}
	}
	return l, err
}

// call is one Lock or TryLock: what each of its attempts, and the undo of
// one, needs. The backend makes it (backend.newCall), in one allocation with
// its own state of the call.
type call struct {
	c     *Client
	name  string
	ref   lockRef
	cfg   *leaseConfig
	owner Owner
	// level is the ID of the level an attempt takes in the lock: the
	// call's request ID, which names its lease (Lease.ID). A Redlock
	// attempt after the first takes a new one.
	level string
	// newOwner: owner was made for this call (the context carried none),
	// so no lock is held by it anywhere yet.
	newOwner bool
	be       any // the backend's state of the call, which holds this call
	// attempt is this call's record among the client's unsettled
	// acquisitions while an attempt runs (see Client.unsettleCall).
	attempt unsettled
	// hold is what the call takes: a lock, or a hold of a read-write lock
	// or a semaphore.
	hold hold
}

// hold is the kind of hold a lock call takes: a lock's (the zero value),
// a read-write lock's reader ('r') or writer ('w'), or a permit ('s') of a
// semaphore of permits.
type hold struct {
	kind    byte
	permits int
}

var lockHold hold

// newCall checks a lock call's arguments and the server's eviction policy.
func (c *Client) newCall(ctx context.Context, name string, h hold, opts []CallOption) (*call, error) {
	if err := c.ready(ctx, name); err != nil {
		return nil, err
	}
	cfg, err := c.callConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, join(ErrNotAcquired, err)
	}
	_, carried := OwnerFrom(ctx)
	owner, err := ownerFor(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.checkPolicy(ctx); err != nil {
		return nil, err
	}
	if _, redlock := c.be.(*quorum); redlock && h.kind != 0 {
		return nil, invalid("read-write locks and semaphores are not supported on a Redlock client yet")
	}
	return c.be.newCall(call{c: c, name: name, cfg: cfg, owner: owner, level: c.reqID(), newOwner: !carried, hold: h}), nil
}

// observed reports a finished Lock or TryLock to the observer.
func (c *Client) observed(name string, h hold, start time.Time, l *Lease, err error) {
	if c.cfg.observe == nil {
		return
	}
	e := Event{Kind: kindNotAcquired, Name: name, Hold: holdNames[h.kind], Wait: time.Since(start), Err: err}
	if l != nil {
		e.Kind, e.Token = kindAcquired, l.token
		if l.depth > 1 {
			e.Kind = kindReentered
		}
	}
	c.cfg.observe(e)
}

// try makes one acquisition attempt, and returns the lease when acquired,
// otherwise the attempt's reply. poll says the attempt is a waiter's
// periodic poll, which seldom acquires.
func (r *call) try(ctx context.Context, poll bool) (*Lease, acquired, error) {
	// Should Close begin meanwhile, it waits for this attempt: for its
	// lease, or the undo of what it took.
	defer r.c.settle(r.c.unsettleCall(r))
	a, err := r.c.be.acquire(ctx, r, poll)
	if err != nil || !a.ok {
		return nil, a, err
	}
	l, err := r.c.newLease(ctx, r, a)
	if a.settle != nil {
		a.settle(l)
	}
	return l, a, err
}

// Lock locks name for ctx's owner, waiting, fairly, as long as ctx and the
// retry strategy allow; if the owner holds it already, Lock reenters it at
// once with the same token. A context without an owner gets a fresh one, so
// two Lock calls with a plain context are two owners and the second waits,
// as with sync.Mutex. opts override the client's defaults for this call.
// ctx bounds the wait only: the lease lives until Unlock, loss or Close.
//
// Lock fails with ErrNotAcquired, joined with ctx's error when ctx ended the
// wait (its message says when this Client holds the name for another owner);
// ErrTooDeep ([WithMaxDepth]); ErrInvalid for a nil ctx or a bad name, owner
// or option; ErrClosed; ErrEvictionPolicy; ErrNotReplicated; ErrForeign;
// ErrOutcomeUnknown when the attempt may have run unconfirmed; and Redis
// errors, wrapped. docs/design.md describes the queue and the handoff.
func (c *Client) Lock(ctx context.Context, name string, opts ...CallOption) (*Lease, error) {
	if err := c.valid(); err != nil {
		return nil, opErr("lock", name, err)
	}
	start := time.Now()
	l, err := c.lock(ctx, name, lockHold, opts)
	err = opErr("lock", name, err)
	c.observed(name, lockHold, start, l, err)
	return l, err
}

func (c *Client) lock(ctx context.Context, name string, h hold, opts []CallOption) (*Lease, error) {
	r, err := c.newCall(ctx, name, h, opts)
	if err != nil {
		return nil, err
	}
	l, err := c.be.lock(ctx, r)
	if err != nil && errors.Is(err, ErrNotAcquired) && (h.kind == 0 || h.kind == 'w') && c.heldHere(name, h.kind, r.owner) {
		err = &heldHereError{err}
	}
	return l, err
}

// keepWaiting returns nil for an attempt a waiting Lock should follow with
// another: one granted so late (a failover, a stalled server) that its
// lease would already be over, which was undone. The wait goes on while ctx
// allows; the attempt's place in the queue may be lost. Other errors are
// returned as they are.
func (r *call) keepWaiting(ctx context.Context, err error) error {
	if err != nil && errors.Is(err, errTooLate) && ctx.Err() == nil {
		r.c.debug("reentrant: acquisition answered too late and undone; waiting on", "name", r.name, "err", err)
		return nil
	}
	return err
}

// track counts a waiting Lock among the client's work, unless it is closed.
func (c *Client) track() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	return true
}

// Do runs fn while holding name, then unlocks, also when fn panics (the
// panic then continues). fn gets the lease's context, which ends if the
// lease is lost or ctx ends, and the fencing token to pass to every fenced
// write. opts apply to the Lock (see [CallOption]).
//
// Do returns Lock's error, or fn's error joined with Unlock's (ErrNotHeld
// when the lease was lost while fn ran). Unlock runs even when ctx has
// ended, bounded by one TTL. A nil fn is ErrInvalid; nothing is acquired.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context, token fence.Token) error, opts ...CallOption) (err error) {
	if fn == nil {
		return opErr("do", name, invalid("nil function"))
	}
	l, err := c.Lock(ctx, name, opts...)
	if err != nil {
		return err
	}
	// fn's context ends with the lease or with ctx, whichever comes first:
	// Do's caller owns fn's lifetime, unlike a bare Lock's.
	fctx, stop := context.WithCancelCause(l.Context())
	defer stop(nil)
	unhook := context.AfterFunc(ctx, func() { stop(context.Cause(ctx)) })
	defer unhook()
	// Deferred, so that a panicking fn releases the lock too instead of
	// leaving it held and renewed until Close.
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.own.cfg.ttl)
		defer cancel()
		uerr := l.Unlock(uctx)
		if lost := l.Err(); uerr != nil && lost != nil && err != nil && errors.Is(err, lost) && errors.Is(uerr, ErrNotHeld) {
			// fn's error already says why the lease ended (a fenced
			// store's refusal under its context carries the cause), and
			// Unlock's would say it again.
			uerr = nil
		}
		err = joinWith("; ", []error{err, uerr})
		if err != nil && seenErr != nil {
			seenErr(err)
		}
	}()
	return fn(fctx, l.Token())
}
