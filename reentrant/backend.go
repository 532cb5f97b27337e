package reentrant

import (
	"context"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
)

// backend is where a Client's locks live: one Redis deployment (single,
// built by New) or a majority of independent masters (quorum, built by
// NewRedlock). The lock algorithm (calls, leases, reentry, renewal, loss,
// Close) is the Client's and is written once; a backend runs the scripts
// and decides what their replies mean. The Client bounds every call it
// makes on a backend by the caller's context (see bounded) and retries it
// while the backend calls its error transient (see retryBusy).
type backend interface {
	// acquire makes one acquisition attempt of r (poll: a waiter's
	// periodic one). It returns the grant, or not OK with the holder's
	// TTL; an attempt whose outcome it cannot know is undone.
	acquire(ctx context.Context, r *call, poll bool) (acquired, error)
	// lock is Lock's wait: attempts of r until one acquires, ctx ends, the
	// retry strategy gives up or the client closes.
	lock(ctx context.Context, r *call) (*Lease, error)
	// undo removes the level and queue entry an attempt of r may have
	// left, waiting at most CleanupBudget/2; undoInBackground does so
	// without waiting; leave does so for a waiter of a closing client.
	undo(r *call) error
	undoInBackground(r *call)
	leave(r *call) error

	// release gives up level of the ownership (owner, tok): the depth
	// left, or -1 when the ownership no longer holds the lock.
	release(ctx context.Context, k scripts.Keys, owner Owner, tok fence.Token, level string) (int64, error)
	// extend keeps the ownership's lock for ttl; false when it is gone.
	extend(ctx context.Context, k scripts.Keys, owner Owner, tok fence.Token, ttl time.Duration) (bool, error)
	// extendBatch renews many ownerships at once, one result each.
	extendBatch(ctx context.Context, reqs []scripts.ExtendReq) []scripts.ExtendResult
	inspect(ctx context.Context, k scripts.Keys) (scripts.State, error)
	force(ctx context.Context, k scripts.Keys, tok fence.Token) (scripts.ForceResult, error)
	// askPolicy checks that no server may evict the fencing counter.
	askPolicy(ctx context.Context) error

	// transient reports an error after which the same call may be sent
	// again (a Cluster refusing for now); reload is done before it is.
	transient(err error) bool
	reload(ctx context.Context)
	// close stops the backend's connections of its own (pub/sub); the
	// Client has cancelled its background context before.
	close() error
}
