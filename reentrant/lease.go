package reentrant

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/lua"
)

// Lease is one successful Lock or TryLock: a hold on a name at some depth
// of reentry. All leases of one ownership (the first acquisition and its
// reentries) share its fencing token.
//
// A Lease is safe for concurrent use. Unlock it exactly once; a second
// Unlock returns ErrNotHeld and changes nothing. A lease that is never
// unlocked is renewed until its Client closes, like a sync.Mutex that is
// never unlocked; use [Client.Do] to make the unlock automatic. The lock is released when
// every lease of the ownership is unlocked, in any order.
type Lease struct {
	c      *Client
	name   string
	keys   lua.Keys
	owner  Owner
	token  fence.Token
	depth  int64
	own    *ownership
	ctx    context.Context
	cancel context.CancelCauseFunc
	relReq string // one request ID for every Unlock attempt, so retrying is safe

	mu       sync.Mutex
	unlocked bool
}

// Name returns the lock's name.
func (l *Lease) Name() string { return l.name }

// Token returns the fencing token of this ownership: the same for every
// reentry, higher than every token of an earlier ownership of the name.
func (l *Lease) Token() fence.Token { return l.token }

// Depth returns the reentry depth this lease was granted at: 1 for a fresh
// acquisition, 2 for the first reentry, and so on.
func (l *Lease) Depth() int64 { return l.depth }

// Owner returns the owner holding the lock.
func (l *Lease) Owner() Owner { return l.owner }

// Context returns a context that carries the owner, so a lock call made
// with it reenters, and that is cancelled when this lease ends: with cause
// ErrReleased after Unlock, ErrLost (wrapped, with the reason) when the lock
// is found gone or cannot be renewed in time, or ErrClosed when the Client
// closes. It keeps the values of the context Lock was called with, but not
// its deadline or cancellation: that context bounds only the wait.
func (l *Lease) Context() context.Context { return l.ctx }

// Done is closed when the lease's context is cancelled; see [Lease.Context].
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Err returns nil while the lease is live, and afterwards why it ended:
// ErrReleased, an error wrapping ErrLost, or ErrClosed. errors.Is(l.Err(), ErrNotHeld) reports a lost lease.
func (l *Lease) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Unlock undoes this lease's acquisition: it decrements the depth, and
// releases the lock and wakes waiters when the depth reaches zero. Only the
// ownership that took the lock can release it: Unlock checks both the owner
// and the token, so a lease of an earlier ownership never touches a later
// one, even by the same owner.
//
// Unlock returns ErrNotHeld when the lease was already unlocked, expired or
// was superseded; Redis errors are returned wrapped, and then the lease
// stays unlocked=false so Unlock may be retried: every attempt carries the
// same request ID and is applied at most once. Unlock on a nil *Lease
// returns ErrNotHeld.
func (l *Lease) Unlock(ctx context.Context) error {
	if l == nil {
		return fmt.Errorf("%w: nil lease", ErrNotHeld)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unlocked {
		return fmt.Errorf("%w: %q: lease already unlocked", ErrNotHeld, l.name)
	}
	n, err := lua.Release(ctx, l.c.rdb, l.keys, string(l.owner), l.token, l.relReq, l.c.cfg.retryWindow)
	if err != nil {
		return fmt.Errorf("reentrant: unlock %q: %w", l.name, err)
	}
	l.unlocked = true
	if n < 0 {
		lost := l.lostErr()
		l.own.end(lost)
		l.cancel(lost)
		return fmt.Errorf("%w: %q: the lease expired or another ownership took the lock", ErrNotHeld, l.name)
	}
	l.cancel(ErrReleased)
	if n == 0 {
		l.own.end(ErrReleased)
	}
	return nil
}

// Extend sets the lock's remaining lease to ttl from now, if this lease's
// ownership (owner and token) still holds it. Renewal, when on, later
// resets the lease to the Client's TTL; Extend is mainly for clients built
// WithoutRenewal.
//
// Extend returns ErrInvalid for a ttl outside [MinTTL, MaxTTL] or not in
// whole milliseconds, ErrNotHeld when the lease was unlocked, lost or
// superseded (a lost lease is never revived, even if the key is still
// there), and Redis errors wrapped.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if err := checkTTL(ttl); err != nil {
		return err
	}
	l.mu.Lock()
	unlocked := l.unlocked
	l.mu.Unlock()
	if unlocked {
		return fmt.Errorf("%w: %q: lease already unlocked", ErrNotHeld, l.name)
	}
	if errors.Is(l.Err(), ErrNotHeld) {
		return fmt.Errorf("%w: %q: lease was lost", ErrNotHeld, l.name)
	}
	ok, err := lua.Extend(ctx, l.c.rdb, l.keys, string(l.owner), l.token, ttl)
	if err != nil {
		return fmt.Errorf("reentrant: extend %q: %w", l.name, err)
	}
	if !ok {
		l.own.end(l.lostErr())
		return fmt.Errorf("%w: %q: the lease expired or another ownership took the lock", ErrNotHeld, l.name)
	}
	return nil
}

func (l *Lease) lostErr() error {
	return fmt.Errorf("%w: %q token %d: expired or taken by another ownership", ErrLost, l.name, l.token)
}

func (c *Client) newLease(ctx context.Context, name string, k lua.Keys, owner Owner, a acquired) (*Lease, error) {
	key := string(owner) + "\x00" + name
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		// The lock was taken as Close ran; it expires after one TTL.
		return nil, ErrClosed
	}
	o := c.owns[key]
	if o == nil || o.token != a.Token || o.ctx.Err() != nil {
		if o != nil {
			// The same owner got a new token: its earlier ownership expired.
			o.end(fmt.Errorf("%w: %q token %d: superseded by token %d", ErrLost, name, o.token, a.Token))
		}
		o = c.newOwnership(key, name, k, owner, a.Token, a.sent)
		c.owns[key] = o
	}
	o.refs++
	c.mu.Unlock()

	// The lease keeps the caller's values (owner, tracing) but not its
	// cancellation: the context given to Lock bounds the wait, as in etcd's
	// and redislock's APIs, and a deadline meant for acquiring must not
	// silently stop renewal of the lock once held.
	lctx, cancel := context.WithCancelCause(WithOwner(context.WithoutCancel(ctx), owner))
	l := &Lease{c: c, name: name, keys: k, owner: owner, token: a.Token, depth: a.Depth,
		own: o, ctx: lctx, cancel: cancel, relReq: c.reqID()}
	stop := context.AfterFunc(o.ctx, func() { cancel(context.Cause(o.ctx)) })
	context.AfterFunc(lctx, func() {
		stop()
		c.dropRef(o)
	})
	return l, nil
}
