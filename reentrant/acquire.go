package reentrant

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
// it, without waiting. A context without an owner gets a fresh one.
//
// It returns ErrNotAcquired when another owner holds the lock; ErrInvalid
// for a nil ctx, a bad name or owner; ErrClosed after Close;
// ErrEvictionPolicy when the server may evict the fencing counter; the
// context's error joined with ErrNotAcquired when ctx ended first (TryLock
// returns then even if go-redis is still waiting for Redis, and undoes the
// acquisition if it lands later); lua.ErrForeign when a key holds a value
// this library did not write; and Redis errors wrapped, keeping their types.
func (c *Client) TryLock(ctx context.Context, name string) (*Lease, error) {
	l, _, err := c.attempt(ctx, name)
	if err == nil && l == nil {
		err = fmt.Errorf("%w: %q is held by another owner", ErrNotAcquired, name)
	}
	return l, err
}

// Lock acquires name for ctx's owner, or reenters it if that owner holds
// it, waiting as long as ctx allows. A context without an owner gets a
// fresh one, so two Lock calls with a plain context are two owners and the
// second waits for the first, like sync.Mutex.
//
// Waiting is notified: a full release publishes on the lock's channel and
// wakes the waiters at once. Because an expiry publishes nothing, a waiter
// also wakes when the holder's remaining TTL runs out (plus jitter), and at
// least every max retry delay.
//
// ctx bounds the wait only, and is honoured whatever the go-redis client's
// options: Lock returns when ctx ends even if a Redis call is in flight.
// Once acquired, the lease lives until Unlock, loss or Close, whatever
// happens to ctx (its values are kept). When ctx ends first, the error
// satisfies both errors.Is(err, ErrNotAcquired) and errors.Is(err,
// ctx.Err()). Other errors are as for [Client.TryLock].
//
// Waiting is not fair: there is no queue, and a holder that locks again
// right after unlocking usually wins against the waiters its release woke.
func (c *Client) Lock(ctx context.Context, name string) (*Lease, error) {
	l, try, err := c.attempt(ctx, name)
	if err != nil || l != nil {
		return l, err
	}
	w, err := c.note.watch(ctx, c.keys(name).Channel)
	if err != nil {
		if cerr := ctxErr(ctx); cerr != nil {
			return nil, errors.Join(ErrNotAcquired, cerr)
		}
		return nil, fmt.Errorf("reentrant: lock %q: waiting: %w", name, err)
	}
	defer w.stop()
	timer := time.NewTimer(c.cfg.maxRetryDelay)
	defer timer.Stop()
	// Retry only once the subscription is active, or a release published in
	// between would be missed; the timer bounds the wait if it never is.
	select {
	case <-w.ready:
	case <-timer.C:
	case <-ctx.Done():
		return nil, errors.Join(ErrNotAcquired, ctx.Err())
	}
	for {
		l, a, err := try()
		if err != nil || l != nil {
			return l, err // errors already classified, with any undo's outcome
		}
		timer.Reset(c.retryDelay(a.HolderTTL))
		select {
		case <-w.wake:
		case <-timer.C:
		case <-ctx.Done():
			return nil, errors.Join(ErrNotAcquired, ctx.Err())
		}
	}
}

// attempt validates the call and makes the first acquisition attempt. It
// returns the lease when acquired; otherwise, with no error, a retry
// closure for the same owner and keys, and the attempt's reply.
func (c *Client) attempt(ctx context.Context, name string) (*Lease, func() (*Lease, acquired, error), error) {
	owner, err := c.check(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	k := c.keys(name)
	try := func() (*Lease, acquired, error) {
		a, err := c.acquire(ctx, k, name, owner)
		if err != nil || !a.OK {
			return nil, a, err
		}
		l, err := c.newLease(ctx, name, k, owner, a)
		return l, a, err
	}
	l, _, err := try()
	return l, try, err
}

func (c *Client) check(ctx context.Context, name string) (Owner, error) {
	if ctx == nil {
		return "", invalid("nil context")
	}
	if err := lua.CheckName(name); err != nil {
		return "", invalid("%v", err)
	}
	if c.isClosed() {
		return "", ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return "", errors.Join(ErrNotAcquired, err)
	}
	owner, err := ownerFor(ctx)
	if err != nil {
		return "", err
	}
	if err := c.checkPolicy(ctx); err != nil {
		return "", err
	}
	return owner, nil
}

// retryDelay is how long to sleep when no release is published: until the
// holder's lease runs out, plus jitter, at most maxRetryDelay.
func (c *Client) retryDelay(holderTTL time.Duration) time.Duration {
	d := c.cfg.maxRetryDelay
	if holderTTL >= 0 && holderTTL < d {
		d = holderTTL
	}
	if c.cfg.jitter > 0 {
		d += rand.N(c.cfg.jitter)
	}
	return d
}

type acquired struct {
	lua.Acquired
	sent  time.Time // when the request left: the lease's clock starts here
	level string    // the level ID, the request ID of this attempt
}

// acquire runs one attempt. The lease's clock starts at sent, before the
// server could have started the TTL, so local expiry errs on the early side.
//
// When the attempt fails in a way that leaves its outcome unknown (no
// reply, the read timed out, the caller's context ended first), the script
// may still have run and left the owner a level of the lock with no lease to
// show for it. acquire then undoes exactly that level, if it exists: within
// CleanupBudget when the caller is still there, in the background otherwise.
func (c *Client) acquire(ctx context.Context, k lua.Keys, name string, owner Owner) (acquired, error) {
	sent := time.Now()
	level := c.reqID()
	type reply struct {
		a     lua.Acquired
		acked int
	}
	out := bounded(c, ctx, CleanupBudget/2, func(ctx context.Context) (reply, error) {
		a, acked, err := c.runAcquire(ctx, k, owner, level)
		return reply{a, acked}, err
	}, func(r reply, err error) {
		if (err == nil && r.a.OK) || (err != nil && mayHaveRun(err, c.retries)) {
			c.undoInBackground(k, owner, level)
		}
	})
	r, err := out.v, out.err
	switch {
	case out.ended && !out.known:
		return acquired{}, errors.Join(ErrNotAcquired, err)
	case out.ended:
		// The caller has gone: whatever the attempt did is undone.
		if (err == nil && r.a.OK) || (err != nil && mayHaveRun(err, c.retries)) {
			if uerr := c.undo(k, owner, level); uerr != nil {
				err = errors.Join(err, uerr)
			}
		}
		return acquired{}, errors.Join(ErrNotAcquired, ctxErr(ctx), err)
	case err == nil && r.a.OK && r.acked < c.cfg.ackReplicas:
		return acquired{}, errors.Join(
			fmt.Errorf("%w: %q: %d of %d replicas within %v", ErrNotReplicated, name, r.acked, c.cfg.ackReplicas, c.cfg.ackTimeout),
			c.undo(k, owner, level))
	case err == nil:
		return acquired{r.a, sent, level}, nil
	case mayHaveRun(err, c.retries):
		if uerr := c.undo(k, owner, level); uerr != nil {
			err = fmt.Errorf("outcome unknown (%w); the lock may stay held by this owner for up to %v: %w", err, c.cfg.ttl, uerr)
		}
	}
	if cerr := ctxErr(ctx); cerr != nil {
		return acquired{}, errors.Join(ErrNotAcquired, cerr, err)
	}
	return acquired{}, fmt.Errorf("reentrant: lock %q: %w", name, err)
}

// undo removes the level an acquire request may have left, waiting at most
// CleanupBudget/2 for Redis; past that the undo goes on in the background.
// It returns nil once Redis confirmed the level is gone (or never was).
func (c *Client) undo(k lua.Keys, owner Owner, level string) error {
	ctx, cancel := context.WithTimeout(c.bg, CleanupBudget/2)
	defer cancel()
	out := bounded(c, ctx, 0, func(ctx context.Context) (bool, error) {
		return lua.Abandon(context.WithoutCancel(ctx), c.rdb, k, string(owner), level)
	}, func(_ bool, err error) {
		if err != nil {
			c.undoInBackground(k, owner, level)
		}
	})
	switch {
	case !out.known:
		return errors.New("reentrant: the undo is still in flight")
	case out.err != nil:
		c.undoInBackground(k, owner, level)
		return fmt.Errorf("reentrant: the undo failed and is retried in the background: %w", out.err)
	}
	return nil
}

// undoInBackground retries removing a level until Redis confirms it, the
// lease it belonged to would have expired anyway, or the client closes.
func (c *Client) undoInBackground(k lua.Keys, owner Owner, level string) {
	giveUp := time.Now().Add(c.cfg.ttl)
	c.goBackground(func() {
		for delay := 10 * time.Millisecond; time.Now().Before(giveUp); delay = min(2*delay, time.Second) {
			if _, err := lua.Abandon(c.bg, c.rdb, k, string(owner), level); err == nil || lua.IsRefusal(err) {
				return
			}
			select {
			case <-c.bg.Done():
				return
			case <-time.After(delay):
			}
		}
	})
}

// runAcquire runs the acquire script, followed by WAIT on the same
// connection when replica acknowledgement is on; acked is the number of
// replicas that acknowledged (0 when it is off).
func (c *Client) runAcquire(ctx context.Context, k lua.Keys, owner Owner, level string) (a lua.Acquired, acked int, err error) {
	if c.cfg.ackReplicas == 0 {
		a, err = lua.Acquire(ctx, c.rdb, k, string(owner), c.cfg.ttl, level)
		return a, 0, err
	}
	var node *redis.Client
	switch rdb := c.rdb.(type) {
	case *redis.Client:
		node = rdb
	case *redis.ClusterClient:
		if node, err = rdb.MasterForKey(ctx, k.Lock); err != nil {
			return a, 0, err
		}
	}
	a, n, err := lua.AcquireAcked(ctx, node, k, string(owner), c.cfg.ttl, level, c.cfg.ackReplicas, c.cfg.ackTimeout)
	return a, int(n), err
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
