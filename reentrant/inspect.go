package reentrant

import (
	"context"
	"time"

	"github.com/redfence/redfence/fence"
)

// State is a snapshot of one lock, read by [Client.Inspect] in one atomic
// step. It is a plain value, safe to copy and keep; nothing in it changes
// when the lock does. Owners are plain strings in it: convert with
// Owner(s.Owner).
type State struct {
	// Name is the lock's name, as given to Inspect.
	Name string
	// Held reports whether an ownership holds the lock.
	Held bool
	// Owner is the holder's owner ID; empty when the lock is free.
	Owner string
	// Depth is the holder's reentry depth, the number of its Levels; 0
	// when free.
	Depth int64
	// Token is the holder's fencing token; fence.None when the lock is
	// free, or held by a Redlock acquisition that has not yet given the
	// hold its token (Held, Owner and Depth are set).
	Token fence.Token
	// TTL is what is left of the holder's lease: the lock key's own
	// expiry; 0 when free.
	TTL time.Duration
	// Meta is the holder's metadata (see [WithMetadata]), or an election
	// term's value (see [Election.Leader] for its start); empty when free
	// or none was given.
	Meta string
	// LastToken is what the name's next token will be above: with time
	// tokens (the default), the floor of the name's hash slot, the highest
	// token issued for any name of the slot (fence.None once it expired);
	// with WithStrictTokens, the name's counter, the highest token it
	// issued. With [NewRedlock] it is the highest counter among the nodes
	// that answered: at least the last token handed out, and above it when
	// an acquisition that got no majority raised a minority's counters
	// with its proposed token (docs/redlock.md).
	LastToken fence.Token
	// Levels are the IDs of the hold's levels ([Lease.ID]), in no order;
	// nil when free.
	Levels []string
	// Waiters is the number of Lock calls queued for the name, and of
	// LockMulti calls waiting for it among others.
	Waiters int64
	// Forced is the last forced unlock of the name ([Client.ForceUnlock])
	// while its record lives, until the forced lease would have ended;
	// nil if none is recorded. A released name keeps no other history:
	// its last owner and how it ended are not recorded.
	Forced *Forced
}

// Forced is the record a forced unlock ([Client.ForceUnlock]) leaves in
// [State.Forced].
type Forced struct {
	// Token is the token of the ownership it ended.
	Token fence.Token
	// At is when, on the Redis server's clock, to the millisecond.
	At time.Time
	// By is the identity of the client that forced it (see [WithIdentity]).
	By string
}

// Inspect reads name's state in one atomic step. It needs no ownership and
// changes nothing. It returns ErrInvalid for a nil ctx or a bad name,
// ErrClosed after Close, ErrForeign for a foreign value, the context's
// error when ctx ended before Redis answered, and Redis errors, wrapped.
func (c *Client) Inspect(ctx context.Context, name string) (State, error) {
	s, err := c.inspect(ctx, name)
	s.Meta = shownMeta(s.Meta)
	return s, opErr("inspect", name, err)
}

func (c *Client) inspect(ctx context.Context, name string) (State, error) {
	if err := c.ready(ctx, name); err != nil {
		return State{}, err
	}
	out := bounded(c, ctx, cleanupBudget/2, func(ctx context.Context) (State, error) {
		return c.be.inspect(ctx, lockRef{name: name})
	}, nil)
	return out.v, out.err
}
