package reentrant

import (
	"context"

	"github.com/redfence/redfence/lua"
)

// State is a snapshot of one lock, as [Client.Inspect] reads it. Owners are
// plain strings in it: convert with Owner(s.Owner).
type State = lua.State

// Ended is an ownership of a lock that has ended, as Redis records it: the
// last one while the lock is free, and the 16 most recent whose lease ran
// out. It says whose hold it was, for tools and post-mortems.
type Ended = lua.Ended

// Inspect reads name's state in one atomic step. It needs no ownership and
// changes nothing. It returns ErrInvalid for a nil ctx or a bad name,
// ErrClosed after Close, ErrForeign for a foreign value, the context's
// error when ctx ended before Redis answered, and Redis errors, wrapped.
func (c *Client) Inspect(ctx context.Context, name string) (State, error) {
	s, err := c.inspect(ctx, name)
	return s, opErr("inspect", name, err)
}

func (c *Client) inspect(ctx context.Context, name string) (State, error) {
	if ctx == nil {
		return State{}, invalid("nil context")
	}
	if err := CheckName(name); err != nil {
		return State{}, err
	}
	if c.isClosed() {
		return State{}, ErrClosed
	}
	out := bounded(c, ctx, CleanupBudget/2, func(ctx context.Context) (State, error) {
		return c.be.inspect(ctx, lockRef{name: name})
	}, nil)
	return out.v, out.err
}
