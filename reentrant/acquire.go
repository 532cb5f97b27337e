package reentrant

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/lua"
)

// CleanupBudget bounds how long a lock call goes on after its context ended,
// or after it failed with an outcome it cannot know (the reply was lost, the
// read timed out): half of it waiting for the Redis call in flight, half
// undoing what that call may have done. What is still unfinished then goes
// on in the background, and Close waits for it.
const CleanupBudget = 200 * time.Millisecond

// TryLock acquires name for ctx's owner, or reenters it if that owner holds
// it, without waiting. A context without an owner gets a fresh one. TryLock
// never jumps the queue: it fails while other Lock calls wait for name.
// opts override the client's options for this call (see [Option]).
//
// It returns ErrNotAcquired when another owner holds the lock or others
// wait for it; ErrTooDeep when a reentry would pass the maximum depth;
// ErrInvalid for a nil ctx, a bad name, owner or option; ErrClosed after
// Close; ErrEvictionPolicy when the server may evict the fencing counter;
// the context's error with ErrNotAcquired when ctx ended first;
// ErrForeign when a key holds a value this library did not write; and
// Redis errors, wrapped.
func (c *Client) TryLock(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	start := time.Now()
	l, err := c.tryLock(ctx, name, opts)
	c.observed(name, start, l, err)
	return l, opErr("trylock", name, err)
}

func (c *Client) tryLock(ctx context.Context, name string, opts []Option) (*Lease, error) {
	r, err := c.newCall(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	l, _, err := r.try(ctx, false)
	if err == nil && l == nil {
		err = fmt.Errorf("%w: held by another owner or others wait for it", ErrNotAcquired)
	}
	return l, err
}

// call is one Lock or TryLock: what each of its attempts, and the undo of
// one, needs.
type call struct {
	c     *Client
	name  string
	keys  lua.Keys
	cfg   *leaseConfig
	req   lua.Request // Level is the call's own ID; Waiter is set when it waits
	owner Owner
	// attempted: a Redlock attempt was made, so the next takes a new
	// level ID (acquireQuorum)
	attempted bool
}

// newCall checks a lock call's arguments and the server's eviction policy.
func (c *Client) newCall(ctx context.Context, name string, opts []Option) (*call, error) {
	if ctx == nil {
		return nil, invalid("nil context")
	}
	if err := CheckName(name); err != nil {
		return nil, err
	}
	cfg, err := c.callConfig(opts)
	if err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, join(ErrNotAcquired, err)
	}
	owner, err := ownerFor(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.checkPolicy(ctx); err != nil {
		return nil, err
	}
	return &call{c: c, name: name, keys: c.keys(name), cfg: cfg, owner: owner,
		req: lua.Request{Owner: string(owner), Level: c.reqID(), TTL: cfg.ttl, Meta: cfg.meta,
			MaxDepth: cfg.maxDepth, Tokens: c.cfg.tokens}}, nil
}

// observed reports a finished Lock or TryLock to the observer.
func (c *Client) observed(name string, start time.Time, l *Lease, err error) {
	if c.cfg.observe == nil {
		return
	}
	e := Event{Kind: NotAcquired, Name: name, Wait: time.Since(start), Err: err}
	if l != nil {
		e.Kind, e.Token = Acquired, l.token
		if l.depth > 1 {
			e.Kind = Reentered
		}
	}
	c.cfg.observe(e)
}

// try makes one acquisition attempt, and returns the lease when acquired,
// otherwise the attempt's reply. poll says the attempt is a waiter's
// periodic poll, which seldom acquires.
func (r *call) try(ctx context.Context, poll bool) (*Lease, acquired, error) {
	a, err := r.c.be.acquire(ctx, r, poll)
	if err != nil || !a.OK {
		return nil, a, err
	}
	l, err := r.c.newLease(ctx, r, a)
	if a.settle != nil {
		a.settle(l)
	}
	return l, a, err
}

type acquired struct {
	lua.Acquired
	sent   time.Time     // when the request left: the lease's clock starts here
	window time.Duration // how long from sent the lease is safe; 0: the TTL less the margin
	// settle, when set (a Redlock grant), must be given the lease made of
	// it, or nil: the nodes that granted late wait for it (quorum.acquire).
	settle func(*Lease)
	// split: a Redlock attempt refused with some nodes granting it, most
	// likely a tie between waiters that tried at once.
	split bool
}

// checkAckClient rejects WithReplicaAck on a client where WAIT cannot follow
// the script on one connection, or would outlast the client's read timeout.
func checkAckClient(rdb redis.UniversalClient, cfg config) error {
	if cfg.ackReplicas == 0 {
		return nil
	}
	var readTimeout time.Duration
	switch rdb := rdb.(type) {
	case *redis.Client:
		readTimeout = rdb.Options().ReadTimeout
	case *redis.ClusterClient:
		readTimeout = rdb.Options().ReadTimeout
	default:
		return invalid("WithReplicaAck needs a *redis.Client or *redis.ClusterClient, not %T", rdb)
	}
	if readTimeout > 0 && cfg.ackTimeout >= readTimeout {
		return invalid("replica acknowledgement timeout %v is not shorter than the client's ReadTimeout %v", cfg.ackTimeout, readTimeout)
	}
	return nil
}

// grantedError is the error of a step after the script granted the lock
// (the WAIT of a poll): the level exists whatever the error, so the caller
// undoes it.
type grantedError struct{ err error }

func (e *grantedError) Error() string { return "after the lock was granted: " + e.err.Error() }
func (e *grantedError) Unwrap() error { return e.err }
