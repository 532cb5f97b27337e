package reentrant

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redfence/redfence/fence"
)

// Lease is one successful Lock or TryLock: one level of a hold on a name.
// All leases of one ownership (the first acquisition and its reentries)
// share its fencing token, and the lock is released when all are unlocked,
// in any order. A Lease is safe for concurrent use; unlock it exactly once
// (see [Client.Do] to make that automatic). Unlock, Extend, TTL and Err of
// a nil *Lease return ErrNotHeld.
type Lease struct {
	c      *Client
	name   string
	ref    lockRef
	owner  Owner
	token  fence.Token
	depth  int64
	level  string // this level's ID in the lock hash: every Unlock attempt names it
	slot   int    // a semaphore permit's slot
	own    *ownership
	caller context.Context // the Lock call's context: the lease's values come from it

	mu       sync.Mutex // held through an Unlock's call to Redis
	unlocked bool

	// The lease's own end and context, guarded by cmu: a lease ends with its
	// ownership, or before it at Unlock (cause). Its context is made the
	// first time it is asked for, so that a Lock+Unlock whose caller never
	// asks makes none.
	cmu    sync.Mutex
	cause  error
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// Name returns the lock's name.
func (l *Lease) Name() string { return l.name }

// Token returns the ownership's fencing token, the same for every reentry,
// higher than every earlier ownership's; fence.None for a nil lease.
func (l *Lease) Token() fence.Token {
	if l == nil {
		return fence.None
	}
	return l.token
}

// Depth returns the depth this lease was granted at: 1 when fresh, 2 for
// the first reentry, and so on.
func (l *Lease) Depth() int64 { return l.depth }

// Owner returns the owner holding the lock.
func (l *Lease) Owner() Owner { return l.owner }

// ID returns this level's ID: unique per Lock call, it names the level in
// Redis and in [State.Levels], so logs and a post-mortem can tell which
// call took it.
func (l *Lease) ID() string { return l.level }

// Context returns a context that carries the owner (a lock call made with it
// reenters) and the lock's name and token, beside those of the leases whose
// contexts Lock was called with (fence.FromContext; fencehttp sends them),
// and that ends when the lease does: with cause ErrReleased after Unlock, or
// ErrLost saying why: ErrGone (Redis says the ownership no longer holds the
// lock), ErrUnconfirmed (no renewal confirmed by the local deadline, the TTL
// less the safety margin on this process's clock), ErrLeaseClosed (also
// ErrClosed; the Client closed). It keeps the values, not the deadline, of
// the context Lock was called with.
func (l *Lease) Context() context.Context {
	l.cmu.Lock()
	defer l.cmu.Unlock()
	if l.ctx == nil {
		// Its cancellation is a child of the ownership's, so that ending
		// the ownership (loss, Close) ends every lease's context before the
		// call that ended it returns. The values are the Lock call's, but
		// not its cancellation: the context given to Lock bounds the wait,
		// as in etcd's and redislock's APIs, and a deadline meant for
		// acquiring must not end a lock once held.
		done, cancel := context.WithCancelCause(l.own.ctx)
		if l.cause != nil {
			cancel(l.cause)
		}
		values := fence.NewContext(WithOwner(context.WithoutCancel(l.caller), l.owner), l.name, l.token)
		l.ctx = leaseCtx{Context: done, values: values}
		l.cancel = cancel
	}
	return l.ctx
}

// Err returns nil while the lease is live, and afterwards why it ended, as
// an *OpError of operation "lease": ErrReleased, or ErrGone, ErrUnconfirmed
// or ErrLeaseClosed, each of which is ErrLost (see [Lease.Context]).
// errors.Is(l.Err(), ErrLost) reports a lost lease. Err reads the local
// deadline itself: once it has passed, Err reports the loss even if the
// timer that ends the lease (and its context) has not run yet, as after a
// process pause; it sets that timer to run at once. A nil lease's Err is
// ErrNotHeld.
func (l *Lease) Err() error {
	if l == nil {
		return opErr("lease", "", errNilLease)
	}
	return opErr("lease", l.name, l.ended())
}

// ended is Err, without the OpError when the cause had none.
func (l *Lease) ended() error {
	l.cmu.Lock()
	cause := l.cause
	l.cmu.Unlock()
	if cause != nil {
		return cause
	}
	if l.own.ctx.Err() == nil {
		// The deadline itself, not only its timer: after a pause (SIGSTOP,
		// a stop-the-world GC) the caller may run before the timer's
		// goroutine does, and must not see a live lease then.
		return l.own.overdue()
	}
	return context.Cause(l.own.ctx)
}

// end ends the lease, not its ownership, with cause; its context, if it
// was made, is cancelled. The first cause stays.
func (l *Lease) end(cause error) {
	l.cmu.Lock()
	defer l.cmu.Unlock()
	if l.cause != nil || l.own.ctx.Err() != nil {
		return
	}
	l.cause = cause
	if l.cancel != nil {
		l.cancel(cause)
	}
}

// Extend keeps the lock held for at least ttl from now, if this lease's
// ownership still holds it, and moves the lease's local deadline with it.
// It never shortens the lock. It is mainly for clients built
// WithoutRenewal.
//
// Extend returns ErrInvalid for a nil ctx or a ttl that is not whole
// milliseconds from 1 ms to MaxTTL; ErrClosed after Close; ErrNotHeld when
// the lease was unlocked, lost or superseded (a lost lease is never
// revived); ErrOutcomeUnknown, with the context's or network's error, when
// the extension was sent and no reply came; other Redis errors, wrapped.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return opErr("extend", "", errNilLease)
	}
	return opErr("extend", l.name, l.extend(ctx, ttl))
}

func (l *Lease) extend(ctx context.Context, ttl time.Duration) error {
	if ctx == nil {
		return invalid("nil context")
	}
	if err := checkTTL(ttl); err != nil {
		return err
	}
	if err := l.live(); err != nil {
		return err
	}
	req := &extendReq{ref: l.ref, owner: l.owner, token: l.token, ttl: ttl}
	m := l.c.watch.mark()
	out := bounded(l.c, ctx, cleanupBudget/2, func(ctx context.Context) (extendResult, error) {
		r := l.c.be.extend(ctx, req)
		return r, r.err
	}, nil)
	if out.err != nil {
		return unknown(l.c, out, m, "call Extend again to learn it")
	}
	if !out.v.held {
		return l.goneFromRedis(out.v.forced)
	}
	l.own.confirm(out.v.sent, ttl)
	return nil
}

// TTL reports how much longer Redis keeps the lock for this lease's
// ownership, in one round trip and without extending it. When Redis says
// the ownership is gone, the lease ends and TTL returns ErrNotHeld.
// Other errors are as for [Lease.Extend].
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil {
		return 0, opErr("ttl", "", errNilLease)
	}
	d, err := l.ttl(ctx)
	return d, opErr("ttl", l.name, err)
}

func (l *Lease) ttl(ctx context.Context) (time.Duration, error) {
	if ctx == nil {
		return 0, invalid("nil context")
	}
	if err := l.live(); err != nil {
		return 0, err
	}
	out := bounded(l.c, ctx, cleanupBudget/2, func(ctx context.Context) (State, error) {
		return l.c.be.inspect(ctx, l.ref)
	}, nil)
	st, err := out.v, out.err
	if err != nil {
		return 0, err
	}
	if st.Owner != string(l.owner) || st.Token != l.token {
		return 0, l.goneFromRedis(nil)
	}
	return st.TTL, nil
}

// live returns nil while the lease may still hold its lock as far as this
// process knows, and the error Extend and TTL return otherwise.
func (l *Lease) live() error {
	if l.c.isClosed() {
		return ErrClosed
	}
	l.mu.Lock()
	unlocked := l.unlocked
	l.mu.Unlock()
	if unlocked {
		return fmt.Errorf("%w: lease already unlocked", ErrNotHeld)
	}
	if err := l.ended(); err != nil {
		if errors.Is(err, ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("%w: lease ended: %w", ErrNotHeld, bare(err))
	}
	return nil
}

// goneFromRedis ends the lease's ownership, which Redis says it no longer
// holds (forced: the forced unlock that ended it, if Redis said so), and
// returns the ErrNotHeld that Unlock, Extend and TTL report then.
func (l *Lease) goneFromRedis(forced *Forced) error {
	l.own.lose(l.own.lostErr(ErrGone, goneReason(forced, "Redis"), nil))
	if forced != nil {
		return fmt.Errorf("%w: token %d: forced unlock by %q", ErrNotHeld, l.token, forced.By)
	}
	return fmt.Errorf("%w: token %d: gone from Redis: deleted, or taken by another owner", ErrNotHeld, l.token)
}

// newLease records a level granted to the call r. A fresh ownership whose
// reply came so late that its lease would already be over is not handed
// out: the level is undone and the caller told it was not acquired.
func (c *Client) newLease(ctx context.Context, r *call, a acquired) (*Lease, error) {
	key := holdKey{r.owner, r.name, r.hold.kind}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		if !r.undoInBackground() { // Close waits for it
			return nil, join(ErrOutcomeUnknown, ErrClosed,
				fmt.Errorf("the lock was granted after Close stopped undoing: it stays held until its TTL (%v) passes", r.cfg.ttl))
		}
		return nil, ErrClosed
	}
	o := c.owns[key]
	if o == nil || o.token != a.token || o.ctx.Err() != nil {
		if o != nil && o.ctx.Err() == nil {
			// The same owner got a new token: its earlier ownership expired.
			// It ends now; it is reported once c.mu is released.
			cause := o.lostErr(ErrGone, fmt.Sprintf("superseded by token %d", a.token), nil)
			o.end(cause)
			defer o.reportLost(cause)
		}
		window := a.window
		if window == 0 {
			window = r.cfg.window()
		}
		if late := time.Since(a.sent); late >= window {
			c.mu.Unlock()
			return nil, gaveUp(fmt.Sprintf("Redis answered after %v", late.Round(time.Millisecond)),
				r.undo(), fmt.Errorf("%w of %v", errTooLate, window))
		}
		o = c.newOwnership(key, r.ref, a.token, r.cfg, a.sent, window)
		if c.owns[key] == nil {
			c.names[holdKey{name: key.name, kind: key.kind}]++
		}
		c.owns[key] = o
	} else {
		o.confirm(a.sent, r.cfg.ttl) // a reentry raised the lock's TTL too
	}
	o.refs++
	c.mu.Unlock()
	return &Lease{c: c, name: r.name, ref: r.ref, owner: r.owner, token: a.token, depth: a.depth,
		level: r.level, own: o, caller: ctx, slot: a.slot}, nil
}

// leaseCtx is a lease's context: cancellation from a child of the
// ownership's context, values from the context the lock call was made with.
type leaseCtx struct {
	context.Context                 // Deadline, Done, Err, and the cancellation's own keys
	values          context.Context // every other value
}

func (c leaseCtx) Value(key any) any {
	// The ownership's context carries no values of its own; what it
	// answers is the context package's bookkeeping (context.Cause).
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.values.Value(key)
}
