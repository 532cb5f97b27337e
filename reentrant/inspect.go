package reentrant

import (
	"context"
	"time"

	"github.com/redfence/redfence/fence"
)

// State is a snapshot of one lock, read by [Client.Inspect] in one atomic
// step: a plain value, safe to copy and keep. Every field but Name,
// LastToken and Forced is zero when the lock is free.
type State struct {
	Name  string // the lock's name, as given
	Held  bool   // an ownership holds the lock
	Owner string // the holder's Owner, as a string
	Depth int64  // the holder's reentry depth, the number of its Levels
	// Token is the holder's fencing token; fence.None also while a Redlock
	// acquisition has not yet given its hold a token (Held is set).
	Token fence.Token
	TTL   time.Duration // what is left of the lock key's expiry
	// Meta is the holder's metadata ([WithMetadata]) or an election term's
	// value.
	Meta string
	// LastToken is what the name's next token will be above: the floor of
	// the name's hash slot with time tokens (fence.None once it expired),
	// the name's counter with WithStrictTokens, the highest counter among
	// the nodes that answered with NewRedlock (docs/redlock.md).
	LastToken fence.Token
	Levels    []string // the IDs of the hold's levels ([Lease.ID]), in no order
	// Waiters counts the Lock calls queued for the name and the LockMulti
	// calls waiting for it.
	Waiters int64
	// Forced is the name's last forced unlock while its record lives (until
	// the forced lease would have ended), or nil. Nothing else of a
	// released name's history is kept.
	Forced *Forced
	// Holders lists, for a read-write lock ([RWMutex.Inspect]) or a
	// semaphore ([Semaphore.Inspect]), each holder's own state: Meta says
	// "write", "read" or "permit"; nil for a lock.
	Holders []State
	// Slot is a permit's slot, in a Semaphore's Holders.
	Slot int
}

// Forced is the record a forced unlock ([Client.ForceUnlock]) leaves in
// [State.Forced].
type Forced struct {
	Token fence.Token // the token of the ownership it ended
	At    time.Time   // when, on the Redis server's clock, to the millisecond
	By    string      // the forcing client: "<hostname>/<pid>", or the CLI's operator
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
