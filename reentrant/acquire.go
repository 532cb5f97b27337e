package reentrant

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
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
// never jumps the queue: when other Lock calls wait for name, it fails even
// if the lock is free at that instant (it then hands the lock to the oldest
// waiter, as a release would). Reentry never queues.
//
// It returns ErrNotAcquired when another owner holds the lock or others
// wait for it; ErrInvalid for a nil ctx, a bad name or owner; ErrClosed
// after Close; ErrEvictionPolicy when the server may evict the fencing
// counter; the context's error joined with ErrNotAcquired when ctx ended
// first (TryLock returns then even if go-redis is still waiting for Redis,
// and undoes the acquisition if it lands later); lua.ErrForeign when a key
// holds a value this library did not write; and Redis errors wrapped,
// keeping their types.
func (c *Client) TryLock(ctx context.Context, name string) (*Lease, error) {
	owner, err := c.check(ctx, name)
	if err != nil {
		return nil, err
	}
	k := c.keys(name)
	l, _, err := c.try(ctx, name, k, owner, c.reqID(), nil, false)
	if err == nil && l == nil {
		err = fmt.Errorf("%w: %q is held by another owner or others wait for it", ErrNotAcquired, name)
	}
	return l, err
}

// Lock acquires name for ctx's owner, or reenters it if that owner holds
// it, waiting as long as ctx allows. A context without an owner gets a
// fresh one, so two Lock calls with a plain context are two owners and the
// second waits for the first, like sync.Mutex.
//
// Waiting is fair: a Lock that cannot take the lock joins the lock's queue
// in Redis, first come first served across every client. A full release
// hands the lock straight to the oldest waiter (a new token, depth 1) and
// wakes that waiter alone, which takes it from the message, and nobody else
// competes. A lock handed to a waiter starts with a lease of half the
// handoff timeout, which the renewer extends to the TTL after half of that;
// with WithoutRenewal or WithReplicaAck the waiter claims the full TTL in
// Redis before Lock returns. Reentry never queues. A waiter whose context
// ends leaves the queue at once (giving the lock on if it had just been
// handed to it). A waiter
// that dies, or misses its handoff message, delays the next one by at most
// the handoff timeout (see WithHandoffTimeout), and a lock whose holder
// died passes to the oldest waiter within a quarter of it after its TTL.
//
// ctx bounds the wait only, and is honoured whatever the go-redis client's
// options: Lock returns when ctx ends even if a Redis call is in flight.
// Once acquired, the lease lives until Unlock, loss or Close, whatever
// happens to ctx (its values are kept). When ctx ends first, the error
// satisfies both errors.Is(err, ErrNotAcquired) and errors.Is(err,
// ctx.Err()). A Lock still waiting when the Client is closed leaves the
// queue and returns ErrClosed; Close waits for it. Other errors are as for
// [Client.TryLock].
func (c *Client) Lock(ctx context.Context, name string) (*Lease, error) {
	owner, err := c.check(ctx, name)
	if err != nil {
		return nil, err
	}
	k := c.keys(name)
	level := c.reqID()
	// Registered before the first request, so that a handoff published
	// right after it finds this waiter.
	w, err := c.note.register(level)
	if err != nil {
		return nil, err
	}
	defer w.stop()
	// A handed lock waits at most half the handoff timeout to be claimed,
	// and never longer than a lease would have lasted.
	q := &lua.Waiter{Channel: c.channel, Claim: min(c.cfg.handoff/2, c.cfg.ttl), Queue: 2*c.cfg.ttl + c.cfg.handoff}
	// A Lock is work of the client's: Close ends its wait and waits for it,
	// so that nothing of a closed client sends another command.
	if !c.track() {
		return nil, ErrClosed
	}
	defer c.wg.Done()
	queued := time.Now() // no handoff to this waiter can come before
	l, a, err := c.try(ctx, name, k, owner, level, q, false)
	if err != nil || l != nil {
		return l, err
	}
	c.note.listen()
	timer := time.NewTimer(c.pollDelay(a.HolderTTL))
	defer timer.Stop()
	for {
		poll := false
		select {
		case <-w.wake:
			if tok := fence.Token(w.handed.Swap(0)); tok != fence.None {
				if l, ok, err := c.takeHanded(ctx, name, k, owner, level, tok, queued, q.Claim); ok {
					return l, err
				}
			}
		case <-timer.C:
			poll = true
		case <-ctx.Done():
			// Leave the queue, and give the lock on if it was just handed
			// here: the undo takes this waiter's level and queue entry.
			return nil, errors.Join(ErrNotAcquired, ctx.Err(), c.undo(k, owner, level, q))
		case <-c.bg.Done():
			return nil, errors.Join(ErrClosed, c.leave(k, owner, level, q))
		}
		l, a, err = c.try(ctx, name, k, owner, level, q, poll)
		if err != nil || l != nil {
			return l, err // errors already classified, with any undo's outcome
		}
		timer.Reset(c.pollDelay(a.HolderTTL)) // no stale tick survives a Reset since Go 1.23
	}
}

// takeHanded accepts the lock that a release handed to this waiter, as the
// handoff message says (token tok), without claiming it in Redis first.
// The handoff gave a lease of claim from the instant it happened, which came
// after queued (when the request that queued this waiter was sent), so the
// lease holds until queued + claim on this process's clock, less a safety
// margin in the same proportion to the claim as the client's margin to its
// TTL; the renewer extends it to the TTL before then (see newOwnership).
// ok is false when the claim must be made in Redis instead: with
// WithReplicaAck (the claim's WAIT covers the handoff), without renewal
// (the lease must last the TTL from the start), or when the message came too
// late to leave half of that window.
func (c *Client) takeHanded(ctx context.Context, name string, k lua.Keys, owner Owner, level string, tok fence.Token,
	queued time.Time, claim time.Duration) (l *Lease, ok bool, err error) {
	if c.cfg.ackReplicas > 0 || c.cfg.renew == 0 {
		return nil, false, nil
	}
	window := claim - time.Duration(float64(claim)*float64(c.cfg.margin)/float64(c.cfg.ttl))
	if time.Until(queued.Add(window)) < window/2 {
		return nil, false, nil
	}
	l, err = c.newLease(ctx, name, k, owner, acquired{Acquired: lua.Acquired{OK: true, Token: tok, Depth: 1},
		sent: queued, level: level, window: window})
	return l, true, err
}

// track counts a waiting Lock among the client's work, unless it is closed.
func (c *Client) track() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	return true
}

// leave takes a waiter of a closing client out of the queue (and gives on a
// lock just handed to it), waiting at most CleanupBudget/2 for Redis with
// a client that honours its context; nothing is left in the background.
// Should it fail, the waiter's place is handed over in its turn and
// expires after the claim time.
func (c *Client) leave(k lua.Keys, owner Owner, level string, q *lua.Waiter) error {
	ctx, cancel := context.WithTimeout(context.Background(), CleanupBudget/2)
	defer cancel()
	if _, err := lua.Abandon(ctx, c.rdb, k, string(owner), level, q, c.cfg.tokens); err != nil {
		return fmt.Errorf("reentrant: lock %q: leaving the queue: %w", k.Lock, err)
	}
	return nil
}

// try makes one acquisition attempt for level (q: as a waiter), and returns
// the lease when acquired, otherwise the attempt's reply. poll says the
// attempt is a waiter's periodic poll, which seldom acquires.
func (c *Client) try(ctx context.Context, name string, k lua.Keys, owner Owner, level string, q *lua.Waiter, poll bool) (*Lease, acquired, error) {
	a, err := c.acquire(ctx, k, name, owner, level, q, poll)
	if err != nil || !a.OK {
		return nil, a, err
	}
	l, err := c.newLease(ctx, name, k, owner, a)
	return l, a, err
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

// pollDelay is how long a waiter sleeps before polling when no handoff
// message wakes it: a quarter of the handoff timeout, or until the
// holder's lease runs out if that is sooner, at most maxRetryDelay, plus
// jitter. Polling is what hands on a lock whose holder died or whose
// handoff was never claimed.
func (c *Client) pollDelay(holderTTL time.Duration) time.Duration {
	d := min(c.cfg.handoff/4, c.cfg.maxRetryDelay)
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
	sent   time.Time     // when the request left: the lease's clock starts here
	level  string        // the level ID, the request ID of this attempt
	window time.Duration // how long from sent the lease is safe; 0: the TTL less the margin
}

// acquire runs one attempt. The lease's clock starts at sent, before the
// server could have started the TTL, so local expiry errs on the early side.
//
// When the attempt fails in a way that leaves its outcome unknown (no
// reply, the read timed out, the caller's context ended first), the script
// may still have run and left the owner a level of the lock with no lease to
// show for it, or a waiter in the queue. acquire then undoes exactly that
// level and queue entry, if they exist: within CleanupBudget when the
// caller is still there, in the background otherwise.
func (c *Client) acquire(ctx context.Context, k lua.Keys, name string, owner Owner, level string, q *lua.Waiter, poll bool) (acquired, error) {
	sent := time.Now()
	type reply struct {
		a     lua.Acquired
		acked int
	}
	// left says whether an attempt whose caller has gone left something to
	// undo: a level, or (a waiter's) a place in the queue.
	left := func(r reply, err error) bool {
		if err != nil {
			return mayHaveRun(err, c.retries)
		}
		return r.a.OK || q != nil
	}
	out := bounded(c, ctx, CleanupBudget/2, func(ctx context.Context) (reply, error) {
		a, acked, err := c.runAcquire(ctx, k, owner, level, q, poll)
		return reply{a, acked}, err
	}, func(r reply, err error) {
		if left(r, err) {
			c.undoInBackground(k, owner, level, q)
		}
	})
	r, err := out.v, out.err
	switch {
	case out.ended && !out.known:
		return acquired{}, errors.Join(ErrNotAcquired, err)
	case out.ended:
		// The caller has gone: whatever the attempt did is undone.
		if left(r, err) {
			if uerr := c.undo(k, owner, level, q); uerr != nil {
				err = errors.Join(err, uerr)
			}
		}
		return acquired{}, errors.Join(ErrNotAcquired, ctxErr(ctx), err)
	case err == nil && r.a.OK && r.acked < c.cfg.ackReplicas:
		return acquired{}, errors.Join(
			fmt.Errorf("%w: %q: %d of %d replicas within %v", ErrNotReplicated, name, r.acked, c.cfg.ackReplicas, c.cfg.ackTimeout),
			c.undo(k, owner, level, q))
	case err == nil:
		return acquired{Acquired: r.a, sent: sent, level: level}, nil
	case mayHaveRun(err, c.retries):
		if uerr := c.undo(k, owner, level, q); uerr != nil {
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
func (c *Client) undo(k lua.Keys, owner Owner, level string, q *lua.Waiter) error {
	ctx, cancel := context.WithTimeout(c.bg, CleanupBudget/2)
	defer cancel()
	out := bounded(c, ctx, 0, func(ctx context.Context) (bool, error) {
		return lua.Abandon(context.WithoutCancel(ctx), c.rdb, k, string(owner), level, q, c.cfg.tokens)
	}, func(_ bool, err error) {
		if err != nil {
			c.undoInBackground(k, owner, level, q)
		}
	})
	switch {
	case !out.known:
		return errors.New("reentrant: the undo is still in flight")
	case out.err != nil:
		c.undoInBackground(k, owner, level, q)
		return fmt.Errorf("reentrant: the undo failed and is retried in the background: %w", out.err)
	}
	return nil
}

// undoInBackground retries removing a level until Redis confirms it, the
// lease it belonged to would have expired anyway, or the client closes.
func (c *Client) undoInBackground(k lua.Keys, owner Owner, level string, q *lua.Waiter) {
	giveUp := time.Now().Add(c.cfg.ttl)
	c.goBackground(func() {
		for delay := 10 * time.Millisecond; time.Now().Before(giveUp); delay = min(2*delay, time.Second) {
			if _, err := lua.Abandon(c.bg, c.rdb, k, string(owner), level, q, c.cfg.tokens); err == nil || lua.IsRefusal(err) {
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
// replicas that acknowledged (0 when it is off). An attempt expected to
// acquire sends both in one round trip. A waiter's poll (poll) sends WAIT
// only once the script granted the lock: a WAIT after a poll that changed
// nothing would still block for its whole timeout while a replica lags.
func (c *Client) runAcquire(ctx context.Context, k lua.Keys, owner Owner, level string, q *lua.Waiter, poll bool) (a lua.Acquired, acked int, err error) {
	if c.cfg.ackReplicas == 0 {
		a, err = lua.Acquire(ctx, c.rdb, k, string(owner), c.cfg.ttl, level, q, c.cfg.tokens)
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
	if !poll {
		a, n, err := lua.AcquireAcked(ctx, node, k, string(owner), c.cfg.ttl, level, q, c.cfg.tokens, c.cfg.ackReplicas, c.cfg.ackTimeout)
		return a, int(n), err
	}
	conn := node.Conn()
	defer conn.Close()
	if a, err = lua.Acquire(ctx, conn, k, string(owner), c.cfg.ttl, level, q, c.cfg.tokens); err != nil || !a.OK {
		return a, 0, err
	}
	n, err := conn.Do(ctx, "WAIT", c.cfg.ackReplicas, c.cfg.ackTimeout.Milliseconds()).Int()
	if err != nil {
		// The script granted the lock; whether the replicas have it is
		// unknown, so the caller undoes it as an outcome it cannot know.
		return lua.Acquired{}, 0, err
	}
	return a, n, nil
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
