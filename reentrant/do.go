package reentrant

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/lua"
)

// Do runs fn while holding name, then unlocks, whatever fn returns and also
// when fn panics (the panic then continues). fn gets the lease's context,
// which is cancelled if the lease is lost or when ctx ends, and the fencing
// token to pass to every fenced write. Do returns Lock's error, or fn's
// error joined with Unlock's (ErrNotHeld when the lease was lost while fn
// ran). Unlock runs even when ctx has ended, bounded by one TTL.
// A nil fn or ctx returns ErrInvalid before anything is acquired.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context, token fence.Token) error) (err error) {
	if fn == nil {
		return invalid("do %q: nil function", name)
	}
	l, err := c.Lock(ctx, name)
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
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ttl)
		defer cancel()
		err = errors.Join(err, l.Unlock(uctx))
	}()
	return fn(fctx, l.Token())
}

// State is a snapshot of one lock, as [Client.Inspect] reads it.
type State struct {
	Name      string
	Held      bool
	Owner     Owner         // empty when free
	Depth     int64         // reentry depth; 0 when free
	Token     fence.Token   // the current ownership's token; None when free
	TTL       time.Duration // what is left of the lease; 0 when free
	LastToken fence.Token   // the last token issued for the name; None if never
	LastOwner Owner         // the owner of the last ownership (the holder when held); empty if none
	Levels    []string      // the IDs of the hold's levels ([Lease.ID]); nil when free
	Waiters   int64         // Lock calls queued for the name
	Ended     []Ended       // ownerships known to have ended, lowest token first
}

// Ended is an ownership of a lock that has ended, as Redis records it: the
// last one while the lock is free, and the 16 most recent whose lease ran
// out. It says whose hold it was, for tools and post-mortems.
type Ended struct {
	Owner   Owner
	Token   fence.Token
	Expired bool // its lease ran out; false: it was released
}

// Inspect reads name's state in one atomic step. It does not need or
// change ownership. It returns ErrInvalid for a nil ctx or a bad name,
// ErrClosed after Close, lua.ErrForeign for a foreign value, the context's
// error when ctx ended before Redis answered, and Redis errors wrapped.
func (c *Client) Inspect(ctx context.Context, name string) (State, error) {
	if ctx == nil {
		return State{}, invalid("inspect %q: nil context", name)
	}
	if err := lua.CheckName(name); err != nil {
		return State{}, invalid("%v", err)
	}
	if c.isClosed() {
		return State{}, ErrClosed
	}
	out := bounded(c, ctx, CleanupBudget/2, func(ctx context.Context) (lua.State, error) {
		return lua.Inspect(ctx, c.rdb, c.keys(name))
	}, nil)
	s, err := out.v, out.err
	if err != nil {
		return State{}, fmt.Errorf("reentrant: inspect %q: %w", name, err)
	}
	st := State{Name: name, Held: s.Owner != "", Owner: Owner(s.Owner), Depth: s.Depth, Token: s.Token,
		TTL: s.TTL, LastToken: s.LastToken, LastOwner: Owner(s.LastOwner), Levels: s.Levels, Waiters: s.Waiters}
	for _, e := range s.Ended {
		st.Ended = append(st.Ended, Ended{Owner: Owner(e.Owner), Token: e.Token, Expired: e.Expired})
	}
	return st, nil
}
