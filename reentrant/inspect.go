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
	// free, or held but Pending.
	Token fence.Token
	// Pending reports a hold that a Redlock acquisition has taken but not
	// yet given its token (Owner and Depth are set, Token is None).
	Pending bool
	// TTL is what is left of the holder's lease; 0 when free. A held lock
	// always has a lease.
	TTL time.Duration
	// Meta is the holder's metadata (see [WithMetadata]); empty when free
	// or none was given.
	Meta string
	// LastToken is the last token issued for the name; fence.None if none
	// was, or if its record expired (see [WithRecordExpiry]). With
	// [NewRedlock] it is the highest counter among the nodes that answered:
	// at least the last token handed out, and above it when an acquisition
	// that got no majority raised a minority's counters with its proposed
	// token (docs/deployments.md).
	LastToken fence.Token
	// Floor is, with time tokens (the default), the name's floor (shared
	// by the names of 32 hash slots on one server, of one on a Cluster):
	// the highest token issued through it in the counter idle time, which
	// every fresh token for the name passes;
	// fence.None if there is none (strict tokens, or none was issued).
	Floor fence.Token
	// LastOwner is the owner of the last ownership, the holder's when the
	// lock is held; empty if none is recorded.
	LastOwner string
	// Levels are the IDs of the hold's levels ([Lease.ID]), in no order;
	// nil when free.
	Levels []string
	// Waiters is the number of Lock calls queued for the name, and of
	// LockMulti calls waiting for it among others.
	Waiters int64
	// Ended are the ownerships known to have ended, lowest token first:
	// the last one while the lock is free, and the 16 most recent whose
	// lease ran out or was forced. nil if none is recorded.
	Ended []Ended
	// Forced is the last forced unlock of the name ([Client.ForceUnlock]);
	// nil if none is recorded.
	Forced *Forced
}

// Ended is an ownership of a lock that has ended, as Redis records it (see
// [State.Ended]). It says whose hold it was, for tools and post-mortems.
type Ended struct {
	// Token is the ended ownership's fencing token.
	Token fence.Token
	// Owner is the ended ownership's owner ID.
	Owner string
	// Expired reports an ownership whose lease ran out, or that was
	// forced; false: it was released by Unlock.
	Expired bool
	// Forced reports an ownership ended by a forced unlock
	// ([Client.ForceUnlock]); Expired is then set too.
	Forced bool
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
	out := bounded(c, ctx, CleanupBudget/2, func(ctx context.Context) (State, error) {
		return c.be.inspect(ctx, lockRef{name: name})
	}, nil)
	return out.v, out.err
}
