package reentrant

// The single backend: locks on one Redis deployment (standalone, Sentinel
// or Cluster, through go-redis's UniversalClient), waiting in the lock's
// queue for a handoff.

import (
	"context"
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
	space   keyspace       // where the keys are
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
	s := &single{c: c, rdb: rdb, note: newNotifier(rdb, c.cfg.prefix, id, c.goBackground), space: keyspace{prefix: c.cfg.prefix},
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
	return sc.init(r, s.space, sc)
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

// Each call below is sent again while a Cluster refuses it for now (see
// retryBusy).

func (s *single) release(ctx context.Context, ref lockRef, owner Owner, tok fence.Token, level string) (released, error) {
	k := keysOf(ref, s.space)
	return retryBusy(s, ctx, func(ctx context.Context) (released, error) {
		r, err := scripts.Release(ctx, s.calls, k, string(owner), tok, level, s.tokens)
		return releasedOf(r), err
	})
}

// extend reports when the attempt that ran was sent: Redis started the TTL
// after.
func (s *single) extend(ctx context.Context, req *extendReq) extendResult {
	k := keysOf(req.ref, s.space)
	r, err := retryBusy(s, ctx, func(ctx context.Context) (extendResult, error) {
		sent := time.Now()
		r, err := scripts.ExtendWhy(ctx, s.rdb, k, string(req.owner), req.token, req.ttl)
		return extendResult{held: r.Held, forced: forcedOf(r.Forced), sent: sent}, err
	})
	r.err = err
	return r
}

// extendBatch sends the renewals in one pipeline, then those a Cluster
// refused for now in another, until each has another answer or ctx ends.
func (s *single) extendBatch(ctx context.Context, reqs []*extendReq) []extendResult {
	sreqs := prepared(reqs, s.space)
	res := scripts.ExtendBatch(ctx, s.rdb, sreqs)
	s.resendBusy(ctx, sreqs, res)
	return extendResults(res)
}

func (s *single) inspect(ctx context.Context, ref lockRef) (State, error) {
	k := keysOf(ref, s.space)
	st, err := retryBusy(s, ctx, func(ctx context.Context) (scripts.State, error) {
		return scripts.Inspect(ctx, s.rdb, k)
	})
	return stateOf(st, s.tokens.Time), err
}

func (s *single) force(ctx context.Context, ref lockRef, tok fence.Token) (forceResult, error) {
	k := keysOf(ref, s.space)
	r, err := retryBusy(s, ctx, func(ctx context.Context) (scripts.ForceResult, error) {
		return scripts.Force(ctx, s.rdb, k, tok, s.c.cfg.identity, s.tokens)
	})
	return forceResultOf(r), err
}

// ready refuses a server whose maxmemory-policy may evict the fencing
// counter (ErrEvictionPolicy), unless the client needs no such check
// (noEvictionCheck). On a Cluster every primary is asked.
func (s *single) ready(ctx context.Context) error {
	if noEvictionCheck(s.c.cfg) {
		return nil
	}
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

func (s *single) close() error { return s.note.close() }

// honoursDeadlines reports whether rdb puts a context's deadline on its
// reads and writes (go-redis's ContextTimeoutEnabled), so that a call
// returns by that deadline however long the server takes. Only a
// *redis.Client (one server, or Sentinel's failover client) counts: a
// ClusterClient with the option still loads its COMMAND table under a 5 s
// timeout of its own, whatever the caller's deadline, and a Ring's routing
// was not examined, so both keep the local timer.
func honoursDeadlines(rdb redis.UniversalClient) bool {
	c, ok := rdb.(*redis.Client)
	return ok && c.Options().ContextTimeoutEnabled
}

// retries reports whether rdb may re-send a command on its own: go-redis
// does while its normalized MaxRetries is above 0 (an Options value of -1
// becomes 0, no retry; 0 becomes the default, 3), and a ClusterClient also
// while MaxRedirects is above 0 (its default, 3): it re-sends after a
// timeout as after a redirect. A client type it cannot inspect is assumed
// to.
func retries(rdb redis.UniversalClient) bool {
	switch rdb := rdb.(type) {
	case *redis.Client:
		return rdb.Options().MaxRetries > 0
	case *redis.ClusterClient:
		o := rdb.Options()
		return o.MaxRetries > 0 || o.MaxRedirects > 0
	case *redis.Ring:
		return rdb.Options().MaxRetries > 0
	}
	return true
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
