package reentrant

// The single backend's acquisition: one attempt of the acquire script (and
// WAIT, with WithReplicaAck), and the undo of whatever an attempt whose
// caller gave up, or never saw the reply, may have taken.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/scripts"
)

// acquireReply is one attempt's reply.
type acquireReply struct {
	a     scripts.Acquired
	acked int
	sent  time.Time // when the last attempt left
}

// acquire runs one attempt, sent again while a Cluster answers that it is
// busy (see retryBusy). The lease's clock starts when the attempt that ran
// was sent, before the server could have started the TTL, so local expiry
// errs on the early side.
//
// When the attempt fails in a way that leaves its outcome unknown (no
// reply, the read timed out, the caller's context ended first), the script
// may still have run and left the owner a level of the lock with no lease to
// show for it, or a waiter in the queue. acquire then undoes exactly that
// level and queue entry, if they exist: within cleanupBudget when the
// caller is still there, in the background otherwise.
func (s *single) acquire(ctx context.Context, r *call, poll bool) (acquired, error) {
	c := s.c
	m := c.watch.mark()
	var out outcome[acquireReply]
	if c.inline(ctx) {
		rep, err := retryBusy(s, ctx, func(ctx context.Context) (acquireReply, error) { return s.attempt(ctx, r, poll) })
		out = ranInline(ctx, rep, err)
	} else {
		// Until the attempt returns, Redis may keep what it takes: should
		// the caller leave first, Close waits for the undo.
		u := c.unsettle(r.name)
		out = bounded(c, ctx, cleanupBudget/2, func(ctx context.Context) (acquireReply, error) {
			return retryBusy(s, ctx, func(ctx context.Context) (acquireReply, error) { return s.attempt(ctx, r, poll) })
		}, func(rep acquireReply, err error) {
			if s.left(r, rep, err, m) {
				r.undoInBackground()
			}
			c.settle(u)
		})
		if out.known {
			defer c.settle(u) // once the undo below is under way
		}
	}
	rep, err := out.v, out.err
	switch {
	case out.ended && !out.known:
		return acquired{}, fmt.Errorf("%w: %w before Redis answered; what the attempt may have taken is undone "+
			"in the background", ErrOutcomeUnknown, err)
	case out.ended:
		// The caller has gone: whatever the attempt did is undone.
		cerr := ctxErr(ctx)
		if s.left(r, rep, err, m) {
			if uerr := r.undo(); uerr != nil {
				return acquired{}, join(ErrOutcomeUnknown, cerr, besides(err, cerr), uerr)
			}
		}
		return acquired{}, join(ErrNotAcquired, cerr, besides(err, cerr))
	case err == nil && rep.a.TooDeep:
		return acquired{}, fmt.Errorf("%w: the hold is %d deep, the maximum (WithMaxDepth)", ErrTooDeep, rep.a.Depth)
	case err == nil && rep.a.OK && rep.acked < c.cfg.ackReplicas:
		return acquired{}, notReplicated(rep.acked, c.cfg.ackReplicas, c.cfg.ackTimeout, r.undo())
	case err == nil:
		a := acquiredOf(rep.a)
		a.sent = rep.sent
		return a, nil
	case s.left(r, rep, err, m):
		if uerr := r.undo(); uerr != nil {
			return acquired{}, fmt.Errorf("%w (%w); the lock may stay held by this owner for up to %v: %w",
				ErrOutcomeUnknown, err, r.cfg.ttl, uerr)
		}
	}
	if cerr := ctxErr(ctx); cerr != nil {
		return acquired{}, join(ErrNotAcquired, cerr, besides(err, cerr))
	}
	return acquired{}, err
}

// attempt runs one acquisition attempt and notes when it left.
func (s *single) attempt(ctx context.Context, r *call, poll bool) (acquireReply, error) {
	sent := time.Now()
	a, acked, err := s.runAcquire(ctx, r, poll)
	return acquireReply{a, acked, sent}, err
}

// left says whether an attempt whose caller has gone left something to
// undo: a level, or (a waiter's) a place in the queue. A waiter's earlier
// attempts may have queued it (again), so it has its place to leave even
// when this attempt sent nothing. m was marked before the attempt.
func (s *single) left(r *call, rep acquireReply, err error, m sendMark) bool {
	sc := singleOf(r)
	if err != nil {
		return sc.again || s.c.ran(err, s.retries, m)
	}
	return rep.a.OK || sc.waiter.Channel != ""
}

// runAcquire runs the acquire script, followed by WAIT on the same
// connection when replica acknowledgement is on; acked is the number of
// replicas that acknowledged (0 when it is off). An attempt expected to
// acquire sends both in one round trip. A waiter's poll (poll) sends WAIT
// only once the script granted the lock: a WAIT after a poll that changed
// nothing would still block for its whole timeout while a replica lags.
func (s *single) runAcquire(ctx context.Context, r *call, poll bool) (a scripts.Acquired, acked int, err error) {
	c, k, req := s.c, &singleOf(r).keys, s.request(r)
	if c.cfg.ackReplicas == 0 {
		a, err = scripts.Acquire(ctx, s.calls, *k, &req)
		return a, 0, err
	}
	var node *redis.Client
	switch rdb := s.rdb.(type) {
	case *redis.Client:
		node = rdb
	case *redis.ClusterClient:
		if node, err = rdb.MasterForKey(ctx, k.Lock); err != nil {
			return a, 0, err
		}
	}
	if !poll {
		a, n, err := scripts.AcquireAcked(ctx, node, *k, &req, c.cfg.ackReplicas, c.cfg.ackTimeout)
		return a, int(n), err
	}
	conn := node.Conn()
	defer conn.Close()
	if a, err = scripts.Acquire(ctx, scripts.Via(conn, node), *k, &req); err != nil || !a.OK {
		return a, 0, err
	}
	n, err := conn.Do(ctx, "WAIT", c.cfg.ackReplicas, c.cfg.ackTimeout.Milliseconds()).Int()
	if err != nil {
		// The script granted the lock; whether the replicas have it is
		// unknown, so the caller must undo it, whatever the error says.
		return scripts.Acquired{}, 0, &grantedError{err}
	}
	return a, n, nil
}

// undo removes the level, and the queue entry, that an attempt of r may
// have left, waiting at most cleanupBudget/2 for Redis; past that the undo
// goes on in the background. It returns nil once Redis confirmed they are
// gone (or never were).
func (s *single) undo(r *call) error {
	c, k, req := s.c, &singleOf(r).keys, s.request(r)
	ctx, cancel := context.WithTimeout(c.bg, cleanupBudget/2)
	defer cancel()
	u := c.unsettle(r.name)
	out := bounded(c, ctx, 0, func(ctx context.Context) (bool, error) {
		return retryBusy(s, ctx, func(ctx context.Context) (bool, error) {
			// A call that bounded leaves running past ctx must outlive the
			// cancel below; one the client bounds by the deadline itself
			// (run inline) must not outlive the deadline.
			actx := ctx
			if !c.inline(ctx) {
				actx = context.WithoutCancel(ctx)
			}
			return scripts.Abandon(actx, s.rdb, *k, &req)
		})
	}, func(_ bool, err error) {
		if err != nil {
			s.undoInBackground(r)
		}
		c.settle(u)
	})
	if out.known {
		defer c.settle(u) // once a background undo below is under way
	}
	switch {
	case !out.known:
		c.debug("reentrant: undo still in flight", "name", r.name, "level", r.level)
		return errors.New("the undo is still in flight; it goes on in the background")
	case out.err != nil:
		if !s.undoInBackground(r) {
			return fmt.Errorf("the undo failed: %w", out.err)
		}
		return fmt.Errorf("the undo failed and is retried in the background: %w", out.err)
	}
	c.debug("reentrant: undone", "name", r.name, "level", r.level, "removed", out.v)
	return nil
}

// undoInBackground retries removing r's level and queue entry until Redis
// confirms it, the lease it belonged to would have expired anyway, or
// Close stops waiting for it (see Client.Close). It reports false when it
// could not start: Close has stopped waiting.
func (s *single) undoInBackground(r *call) bool {
	c, k, req := s.c, &singleOf(r).keys, s.request(r)
	giveUp := time.Now().Add(r.cfg.ttl)
	u := c.unsettle(r.name)
	return c.goSettle(func() {
		b := backoff{next: 10 * time.Millisecond, max: time.Second}
		for time.Now().Before(giveUp) {
			_, err := scripts.Abandon(c.bg, s.rdb, *k, &req)
			if err == nil || scripts.IsRefusal(err) {
				c.debug("reentrant: undone in the background", "name", r.name, "level", req.Level, "err", err)
				c.settle(u)
				return
			}
			if errors.Is(err, redis.ErrClosed) {
				// The go-redis client was closed under this one: nothing
				// can undo through it any more.
				c.cfg.log.Warn("reentrant: cannot undo an acquisition: the go-redis client is closed; its level expires with the lease",
					"name", r.name, "level", req.Level)
				c.settle(u)
				return
			}
			d := b.delay()
			c.debug("reentrant: background undo failed, retrying", "name", r.name, "level", req.Level, "err", err, "delay", d)
			if !c.sleepUndo(d) {
				return // Close stopped waiting: it names r's lock
			}
		}
		c.settle(u) // the level has expired by now
		c.cfg.log.Warn("reentrant: gave up undoing an acquisition; its level expires with the lease",
			"name", r.name, "level", req.Level)
	})
}

// leave takes a waiter of a closing client out of the queue (and gives on a
// lock just handed to it), waiting at most cleanupBudget/2 for Redis with
// a client that honours its context; nothing is left in the background.
// Should it fail, the waiter's place is handed over in its turn and
// expires after the claim time.
func (s *single) leave(r *call) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupBudget/2)
	defer cancel()
	k, req := &singleOf(r).keys, s.request(r)
	_, err := retryBusy(s, ctx, func(ctx context.Context) (bool, error) {
		return scripts.Abandon(ctx, s.rdb, *k, &req)
	})
	if err != nil {
		return fmt.Errorf("leaving the queue: %w", err)
	}
	return nil
}

// grantedError is the error of a step after the script granted the lock
// (the WAIT of a poll): the level exists whatever the error, so the caller
// undoes it.
type grantedError struct{ err error }

func (e *grantedError) Error() string { return "after the lock was granted: " + e.err.Error() }

func (e *grantedError) Unwrap() error { return e.err }
