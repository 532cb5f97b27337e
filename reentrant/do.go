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

// NoExpiry is the TTL [Client.Inspect] reports for a held lock whose key
// has no expiry (someone removed it with PERSIST).
const NoExpiry time.Duration = -1

// State is a snapshot of one lock, as [Client.Inspect] reads it.
type State struct {
	Name      string
	Held      bool
	Owner     Owner         // empty when free
	Depth     int64         // reentry depth; 0 when free
	Token     fence.Token   // the current ownership's token; None when free
	TTL       time.Duration // remaining lease; 0 when free, NoExpiry if the key has none
	LastToken fence.Token   // the last token ever issued for the name; None if never
	Levels    []string      // the IDs of the hold's levels ([Lease.ID]); nil when free
	Waiters   int64         // Lock calls queued for the name
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
		LastToken: s.LastToken, Levels: s.Levels, Waiters: s.Waiters}
	switch {
	case s.TTL > 0:
		st.TTL = s.TTL
	case st.Held:
		st.TTL = NoExpiry
	}
	return st, nil
}
