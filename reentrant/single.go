package reentrant

// The single backend: locks on one Redis deployment (standalone, Sentinel
// or Cluster, through go-redis's UniversalClient), waiting in the lock's
// queue for a handoff.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
)

// single is the backend of a Client built by New.
type single struct {
	c       *Client
	rdb     redis.UniversalClient
	note    *notifier
	prefix  string         // of the keys
	tokens  scripts.Tokens // how the scripts issue a fresh token
	retries bool           // the go-redis client may re-send a command on its own
	// calls sends the acquire and release scripts: rdb, or on a
	// *redis.Client that does not enforce contexts (go-redis's default),
	// rdb with concurrent calls batched into pipelines (scripts.Batched).
	// A call there waits for its reply as it would through rdb.
	calls redis.Scripter
}

// batchLeaders is how many acquire or release calls, or batches of them,
// one Client has in flight on a standalone server before further calls wait
// to share a pipeline.
const batchLeaders = 2

func newSingle(c *Client, rdb redis.UniversalClient, id string) *single {
	s := &single{c: c, rdb: rdb, note: newNotifier(rdb, c.cfg.prefix, id, c.goBackground), prefix: c.cfg.prefix,
		tokens: tokensOf(c.cfg), retries: retries(rdb), calls: rdb}
	if r, ok := rdb.(*redis.Client); ok && !c.deadlines {
		s.calls = scripts.Batch(r, batchLeaders)
	}
	return s
}

// singleCall is a lock call on one deployment: the call, its lock's keys,
// and its place in the lock's queue while it waits.
type singleCall struct {
	redisCall
	// waiter is the call's queue entry, its Channel set once the call
	// waits (single.lock), and wait the notifier's record of it: parts of
	// the call, not allocations of their own.
	waiter scripts.Waiter
	wait   waiter
	// again: an attempt was made that may have queued the call (see
	// scripts.Request.Again).
	again bool
}

func (s *single) newCall(r call) *call {
	sc := new(singleCall)
	return sc.init(r, s.prefix, sc)
}

// singleOf returns the single backend's state of r.
func singleOf(r *call) *singleCall { return r.be.(*singleCall) }

// request is r's acquisition as the scripts see it.
func (s *single) request(r *call) scripts.Request {
	sc := singleOf(r)
	req := requestOf(r, s.tokens)
	if sc.waiter.Channel != "" {
		req.Waiter = &sc.waiter
	}
	req.Again = sc.again
	return req
}

func (s *single) release(ctx context.Context, ref lockRef, owner Owner, tok fence.Token, level string) (int64, error) {
	return scripts.Release(ctx, s.calls, keysOf(ref, s.prefix), string(owner), tok, level, s.tokens)
}

func (s *single) extend(ctx context.Context, req *extendReq) extendResult {
	sent := time.Now()
	held, err := scripts.Extend(ctx, s.rdb, keysOf(req.ref, s.prefix), string(req.owner), req.token, req.ttl, s.tokens)
	return extendResult{held: held, sent: sent, err: err}
}

// extendBatch sends the renewals in one pipeline.
func (s *single) extendBatch(ctx context.Context, reqs []*extendReq) []extendResult {
	return extendResults(scripts.ExtendBatch(ctx, s.rdb, prepared(reqs, s.prefix), s.tokens))
}

func (s *single) inspect(ctx context.Context, ref lockRef) (State, error) {
	return scripts.Inspect(ctx, s.rdb, keysOf(ref, s.prefix))
}

func (s *single) force(ctx context.Context, ref lockRef, tok fence.Token) (forceResult, error) {
	r, err := scripts.Force(ctx, s.rdb, keysOf(ref, s.prefix), tok, s.c.cfg.identity, s.tokens)
	return forceResultOf(r), err
}

// askPolicy asks the server, or on a Cluster every primary.
func (s *single) askPolicy(ctx context.Context) error {
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		var errs []error
		err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			if err := policyOf(ctx, node); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return nil
		})
		return join(append(errs, err)...)
	}
	return policyOf(ctx, s.rdb)
}

// transient reports an error to try again after: busy, or on a Cluster a
// connection that could not be made.
func (s *single) transient(err error) bool {
	if err == nil {
		return false
	}
	if busy(err) {
		return true
	}
	var op *net.OpError
	_, cluster := s.rdb.(*redis.ClusterClient)
	return cluster && errors.As(err, &op) && op.Op == "dial"
}

// reload has a Cluster client learn the slots' owners anew, as go-redis
// does by itself after MOVED, but not after CLUSTERDOWN or a failed dial,
// nor on the connections of WithReplicaAck, which go to one node.
func (s *single) reload(ctx context.Context) {
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		cc.ReloadState(ctx)
	}
}

func (s *single) close() error { return s.note.close() }

// acquire runs one attempt, sent again while a Cluster answers that it is
// busy (see retryBusy). The lease's clock starts when the attempt that ran
// was sent, before the server could have started the TTL, so local expiry
// errs on the early side.
//
// When the attempt fails in a way that leaves its outcome unknown (no
// reply, the read timed out, the caller's context ended first), the script
// may still have run and left the owner a level of the lock with no lease to
// show for it, or a waiter in the queue. acquire then undoes exactly that
// level and queue entry, if they exist: within CleanupBudget when the
// caller is still there, in the background otherwise.
func (s *single) acquire(ctx context.Context, r *call, poll bool) (acquired, error) {
	c := s.c
	var out outcome[acquireReply]
	if c.inline(ctx) {
		rep, err := retryBusy(c, ctx, func(ctx context.Context) (acquireReply, error) { return s.attempt(ctx, r, poll) })
		out = ranInline(ctx, rep, err)
	} else {
		out = bounded(c, ctx, CleanupBudget/2, func(ctx context.Context) (acquireReply, error) {
			return retryBusy(c, ctx, func(ctx context.Context) (acquireReply, error) { return s.attempt(ctx, r, poll) })
		}, func(rep acquireReply, err error) {
			if r.left(rep, err, s.retries) {
				r.undoInBackground()
			}
		})
	}
	rep, err := out.v, out.err
	switch {
	case out.ended && !out.known:
		return acquired{}, join(ErrNotAcquired, err)
	case out.ended:
		// The caller has gone: whatever the attempt did is undone.
		if r.left(rep, err, s.retries) {
			err = join(err, r.undo())
		}
		return acquired{}, join(ErrNotAcquired, ctxErr(ctx), err)
	case err == nil && rep.a.TooDeep:
		return acquired{}, fmt.Errorf("%w: the hold is %d deep, the maximum (WithMaxDepth)", ErrTooDeep, rep.a.Depth)
	case err == nil && rep.a.OK && rep.acked < c.cfg.ackReplicas:
		return acquired{}, join(
			fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, rep.acked, c.cfg.ackReplicas, c.cfg.ackTimeout),
			r.undo())
	case err == nil:
		a := acquiredOf(rep.a)
		a.sent = rep.sent
		return a, nil
	case mayHaveRun(err, s.retries):
		if uerr := r.undo(); uerr != nil {
			err = fmt.Errorf("outcome unknown (%w); the lock may stay held by this owner for up to %v: %w", err, r.cfg.ttl, uerr)
		}
	}
	if cerr := ctxErr(ctx); cerr != nil {
		return acquired{}, join(ErrNotAcquired, cerr, err)
	}
	return acquired{}, err
}

// acquireReply is one attempt's reply.
type acquireReply struct {
	a     scripts.Acquired
	acked int
	sent  time.Time // when the last attempt left
}

// attempt runs one acquisition attempt and notes when it left.
func (s *single) attempt(ctx context.Context, r *call, poll bool) (acquireReply, error) {
	sent := time.Now()
	a, acked, err := s.runAcquire(ctx, r, poll)
	return acquireReply{a, acked, sent}, err
}

// left says whether an attempt whose caller has gone left something to
// undo: a level, or (a waiter's) a place in the queue.
func (r *call) left(rep acquireReply, err error, retries bool) bool {
	if err != nil {
		return mayHaveRun(err, retries)
	}
	return rep.a.OK || singleOf(r).waiter.Channel != ""
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
// have left, waiting at most CleanupBudget/2 for Redis; past that the undo
// goes on in the background. It returns nil once Redis confirmed they are
// gone (or never were).
func (s *single) undo(r *call) error {
	c, k, req := s.c, &singleOf(r).keys, s.request(r)
	ctx, cancel := context.WithTimeout(c.bg, CleanupBudget/2)
	defer cancel()
	out := bounded(c, ctx, 0, func(ctx context.Context) (bool, error) {
		return retryBusy(c, ctx, func(ctx context.Context) (bool, error) {
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
	})
	switch {
	case !out.known:
		c.debug("reentrant: undo still in flight", "name", r.name, "level", r.level)
		return errors.New("the undo is still in flight")
	case out.err != nil:
		s.undoInBackground(r)
		return fmt.Errorf("the undo failed and is retried in the background: %w", out.err)
	}
	c.debug("reentrant: undone", "name", r.name, "level", r.level, "removed", out.v)
	return nil
}

// undoInBackground retries removing r's level and queue entry until Redis
// confirms it, the lease it belonged to would have expired anyway, or the
// client closes.
func (s *single) undoInBackground(r *call) {
	c, k, req := s.c, &singleOf(r).keys, s.request(r)
	giveUp := time.Now().Add(r.cfg.ttl)
	c.goBackground(func() {
		b := backoff{next: 10 * time.Millisecond, max: time.Second}
		for time.Now().Before(giveUp) {
			_, err := scripts.Abandon(c.bg, s.rdb, *k, &req)
			if err == nil || scripts.IsRefusal(err) {
				c.debug("reentrant: undone in the background", "name", r.name, "level", req.Level, "err", err)
				return
			}
			d := b.delay()
			c.debug("reentrant: background undo failed, retrying", "name", r.name, "level", req.Level, "err", err, "delay", d)
			if !sleep(c.bg.Done(), d) {
				return
			}
		}
		c.cfg.log.Warn("reentrant: gave up undoing an acquisition; its level expires with the lease",
			"name", r.name, "level", req.Level)
	})
}

// leave takes a waiter of a closing client out of the queue (and gives on a
// lock just handed to it), waiting at most CleanupBudget/2 for Redis with
// a client that honours its context; nothing is left in the background.
// Should it fail, the waiter's place is handed over in its turn and
// expires after the claim time.
func (s *single) leave(r *call) error {
	c := s.c
	ctx, cancel := context.WithTimeout(context.Background(), CleanupBudget/2)
	defer cancel()
	k, req := &singleOf(r).keys, s.request(r)
	_, err := retryBusy(c, ctx, func(ctx context.Context) (bool, error) {
		return scripts.Abandon(ctx, s.rdb, *k, &req)
	})
	if err != nil {
		return fmt.Errorf("leaving the queue: %w", err)
	}
	return nil
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
