package reentrant

import (
	"context"
	"fmt"
	"time"

	"github.com/redfence/redfence/fence"
)

// backend is where a Client's locks live: one Redis deployment (single,
// built by New) or a majority of independent masters (quorum, built by
// NewRedlock). The lock algorithm (calls, leases, reentry, renewal, loss,
// Close) is the Client's and is written once; a backend runs the scripts
// and decides what their replies mean. It speaks this package's own
// requests and replies (call, lockRef, acquired, extendReq, extendResult,
// forceResult, State), so the algorithm knows nothing of keys, scripts or
// go-redis. The Client bounds every call it makes on a backend by the
// caller's context (see bounded); what to send again after an error, and
// when, is the backend's own business.
type backend interface {
	// newCall returns r as a call of this backend: r in the one
	// allocation a Lock or TryLock makes, beside the backend's own state
	// of the call (r.be), with r.ref made. r.level is set.
	newCall(r call) *call
	// ready checks, before the first acquisition, that the deployment
	// can keep tokens increasing (ErrEvictionPolicy); the Client asks
	// again until it succeeds once.
	ready(ctx context.Context) error

	// acquire makes one acquisition attempt of r (poll: a waiter's
	// periodic one). It returns the grant, or not OK with the holder's
	// TTL; an attempt whose outcome it cannot know is undone.
	acquire(ctx context.Context, r *call, poll bool) (acquired, error)
	// lock is Lock's wait: attempts of r until one acquires, ctx ends, the
	// retry strategy gives up or the client closes.
	lock(ctx context.Context, r *call) (*Lease, error)
	// acquireMulti makes one all-or-nothing attempt of a LockMulti at its
	// calls m.rs (one per name, sorted, for one owner): a grant for each,
	// or the names that refused, with nothing of the attempt left held.
	// With m.waiting the attempt may leave queue entries that a release
	// wakes m.wake with; leaveMulti, once the call ends, removes them.
	acquireMulti(ctx context.Context, m *multiCall) (multiResult, error)
	leaveMulti(m *multiCall)
	// undo removes the level and queue entry an attempt of r may have
	// left, waiting at most cleanupBudget/2; undoInBackground does so
	// without waiting (false when it could not start: Close has stopped
	// waiting for undos); leave does so for a waiter of a closing client.
	undo(r *call) error
	undoInBackground(r *call) bool
	leave(r *call) error

	// release gives up level of the ownership (owner, tok).
	release(ctx context.Context, ref lockRef, owner Owner, tok fence.Token, level string) (released, error)
	// extend keeps the ownership's lock for req.ttl; held is false when it
	// is gone.
	extend(ctx context.Context, req *extendReq) extendResult
	// extendBatch renews many ownerships at once, one result each.
	extendBatch(ctx context.Context, reqs []*extendReq) []extendResult
	// inspect reads the lock's state.
	inspect(ctx context.Context, ref lockRef) (State, error)
	// scan calls page with the names of the locks (and, on one
	// deployment, of the read-write locks and semaphores) whose keys SCAN
	// finds under the prefix, one page at a time, on every server that
	// holds locks, until page returns false; a name may come more than
	// once.
	scan(ctx context.Context, page func(names []listed) bool) error
	// proclaim writes an election's term (proclaim.lua): with stamp
	// false, the ownership (owner, tok) gets value, keeping its start
	// (held false when it does not hold the lock with an election's
	// metadata); with stamp true (owner and value unused), the ownership
	// with token tok gets the server's clock as its start if it has none,
	// and its metadata is returned (held false when it does not hold the
	// lock).
	proclaim(ctx context.Context, ref lockRef, owner Owner, tok fence.Token, value string, stamp bool) (meta string, held bool, err error)
	// force ends the ownership with token tok, whoever holds it.
	force(ctx context.Context, ref lockRef, tok fence.Token) (forceResult, error)
	// close stops the backend's connections of its own (pub/sub); the
	// Client has cancelled its background context before.
	close() error
}

// lockRef is one lock as a backend addresses it: its name, and what the
// backend made of the name once (the Redis backends: its keys), so that a
// call's leases and ownership build nothing again for each command. A
// lockRef{name} alone is valid: the backend then makes what it needs.
type lockRef struct {
	name string
	keys any // the backend's own; nil: made from name when needed
}

// acquired is a backend's answer to one acquisition attempt: granted (ok),
// or refused with what is left of the holder's lease.
type acquired struct {
	ok        bool
	token     fence.Token   // the ownership's token, when ok
	depth     int64         // the depth the call holds the lock at, when ok
	holderTTL time.Duration // what is left of the holder's lease, when not ok
	sent      time.Time     // when the request left: the lease's clock starts here
	window    time.Duration // how long from sent the lease is safe; 0: the TTL less the margin
	// settle, when set (a Redlock grant), must be given the lease made of
	// it, or nil: the nodes that granted late wait for it (quorum.acquire).
	settle func(*Lease)
	// split: a Redlock attempt refused with some nodes granting it, most
	// likely a tie between waiters that tried at once.
	split bool
	// slot is a semaphore permit's slot, when ok.
	slot int
}

// extendReq asks a backend to keep one ownership's lock for ttl from now.
type extendReq struct {
	ref   lockRef
	owner Owner
	token fence.Token
	ttl   time.Duration
	// prep is what the backend prepared at the request's first send and
	// reuses at every later one (the Redis backends: the script's
	// arguments): an ownership keeps one request for all its renewals.
	prep any
}

// extendResult is the outcome of one extendReq: held when the ownership
// still holds the lock and now has ttl left, from no earlier than sent;
// false, without err, when it is gone.
type extendResult struct {
	held   bool
	forced *Forced   // when not held because a forced unlock ended the ownership, and Redis said so
	sent   time.Time // when the attempt that ran left, before the server could start the TTL
	err    error
}

// released is a backend's answer to a release.
type released struct {
	// left is the depth left when the ownership held the level's lock (0:
	// released now); -1 when it does not hold the lock.
	left int64
	// free, with -1: the name is free and nobody took it since this
	// ownership, which is what a retried release finds once its first
	// attempt freed the lock.
	free bool
	// forced, with -1: the forced unlock that ended the ownership, while
	// Redis keeps its record.
	forced *Forced
}

// goneReason says why Redis no longer holds an ownership, as a lost lease's
// cause puts it: who forced it and when, if Redis still has that record,
// else what (a renewal, Redis) found. An expiry is not among the reasons:
// the lease's local deadline passes before Redis expires it, and that
// deadline's own loss says so.
func goneReason(f *Forced, what string) string {
	if f != nil {
		return fmt.Sprintf("forced by %q at %s", f.By, f.At.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	}
	return what + " found it gone: deleted, or taken by another owner"
}

// forceResult is a backend's answer to a forced unlock.
type forceResult struct {
	ended  bool        // the ownership held the lock and this call ended it
	repeat bool        // the ownership had been forced already (a retry)
	holder fence.Token // when neither: who holds the lock; None when free
}
