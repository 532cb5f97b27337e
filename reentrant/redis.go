package reentrant

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/scripts"
)

// result is what one Redis call returned.
type result[T any] struct {
	v   T
	err error
}

// outcome is how a bounded call ended.
type outcome[T any] struct {
	v   T
	err error // the call's error, or ctx's when the call's result is unknown
	// ended: ctx ended before the call returned. The call's own v and err
	// are still there when it returned within the cleanup grace; otherwise
	// known is false and late gets them in the background.
	ended, known bool
}

// bounded runs f and returns its result, or gives up soon after ctx ends.
// A go-redis client built without ContextTimeoutEnabled ignores ctx's
// deadline on reads, and its retries can outlast it; a caller must not be
// held past its own deadline for that. When ctx ends first, bounded still
// waits up to grace for the call, so that a responsive server's answer is
// not thrown away; past that, f goes on in the background and late, if not
// nil, receives its result there.
//
// f runs inline, without a goroutine, when nothing is to be bounded: ctx
// never ends, or has no deadline (its cancellation is then noticed by
// go-redis between attempts and at its own timeouts), or the client honours
// the deadline itself (ContextTimeoutEnabled: its i/o timeout is the
// deadline). After Close nothing runs in the background, so f runs inline
// too.
func bounded[T any](c *Client, ctx context.Context, grace time.Duration, f func(context.Context) (T, error), late func(T, error)) outcome[T] {
	if c.inline(ctx) {
		v, err := f(ctx)
		return ranInline(ctx, v, err)
	}
	done := make(chan result[T], 1)
	if !c.goBackground(func() {
		v, err := f(ctx)
		done <- result[T]{v, err}
	}) {
		v, err := f(ctx)
		return outcome[T]{v: v, err: err, known: true}
	}
	select {
	case r := <-done:
		return outcome[T]{v: r.v, err: r.err, ended: ctxErr(ctx) != nil, known: true}
	case <-ctx.Done():
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case r := <-done:
		return outcome[T]{v: r.v, err: r.err, ended: true, known: true}
	case <-t.C:
	}
	if late != nil {
		// Once closed, nobody undoes: the level expires after one TTL.
		c.goBackground(func() {
			r := <-done
			late(r.v, r.err)
		})
	}
	return outcome[T]{err: ctxErr(ctx), ended: true}
}

// ranInline is the outcome of a call that bounded ran, or would have run,
// inline. The hot paths (acquire, release) call f themselves when
// c.inline(ctx), so that f, which bounded may hand to a goroutine, is not
// allocated on the heap for every call.
func ranInline[T any](ctx context.Context, v T, err error) outcome[T] {
	return outcome[T]{v: v, err: err, ended: ctx.Done() != nil && ctxErr(ctx) != nil, known: true}
}

// inline reports whether bounded runs a call under ctx on the caller's
// goroutine: ctx has no deadline to keep, or the client keeps it itself.
func (c *Client) inline(ctx context.Context) bool {
	_, deadline := ctx.Deadline()
	return !deadline || c.deadlines
}

// mayHaveRun reports whether a script call that returned err may have been
// applied. A script's own refusal, and any reply from the server, prove that
// the last attempt did not apply; a command that never left (no connection)
// did not either. But a go-redis client that retries may have sent an
// earlier attempt that was applied and whose reply was lost, and the final
// error says nothing of it, so with retries on only a script's own refusal
// is proof (the scripts recognise their own earlier attempts by request ID,
// so the last attempt's refusal speaks for all of them).
func mayHaveRun(err error, retries bool) bool {
	var granted *grantedError
	switch {
	case err == nil || errors.As(err, &granted):
		return true
	case scripts.IsRefusal(err):
		return false
	case retries:
		return true
	case isReply(err) || neverSent(err):
		return false
	}
	return true
}

// isReply reports whether err is an error reply from the server.
func isReply(err error) bool {
	var r redis.Error
	return errors.As(err, &r) && !errors.Is(err, redis.ErrClosed) && !errors.Is(err, redis.ErrPoolTimeout)
}

// neverSent reports errors raised before a command could reach the server:
// no connection could be made, the pool had none to give, or the client was
// closed.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed)
}

// ctxErr is ctx.Err, also in the instant after ctx's deadline passed and
// before ctx.Err reports it: go-redis puts the deadline on the socket, so
// its i/o timeout can arrive first, and the caller must still be able to
// tell that its deadline, not Redis, ended the call.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// A Redis Cluster refuses, without running it, a command that comes while
// a slot moves or a primary is being replaced:
//
//   - TRYAGAIN: the command names several keys of a moving slot and they
//     are split between the two nodes, or some are missing on the node
//     asked. Every lock script but extend names the lock's hash and its
//     queue, and a lock nobody waits for has no queue, so its acquire and
//     release get TRYAGAIN for the whole move of its slot, from SETSLOT
//     MIGRATING to SETSLOT NODE.
//   - ASK and MOVED: the slot is (being) served elsewhere. go-redis follows
//     them, up to MaxRedirects (3 by default), and returns the last one.
//   - CLUSTERDOWN: a primary has failed and no replica has taken over yet;
//     with cluster-require-full-coverage (the default) every node refuses
//     every command until one has.
//
// And a primary killed outright refuses connections until a replica is
// elected in its place, which go-redis only learns at its next reload of
// the slots (after a MOVED, or every ClusterStateReloadInterval, 60 s by
// default).
//
// go-redis itself retries TRYAGAIN, CLUSTERDOWN and failed dials within
// MaxRedirects, a few tens of ms in all, which a slot move of a few hundred
// keys or an election outlasts. Each of these errors proves its attempt did
// nothing, so the client has go-redis reload the slots and sends the call
// again (with the same level ID, so no earlier attempt that may have run is
// applied twice) while the caller's context allows and for at most
// busyLimit, backing off from busyMin to busyMax. A cluster that stays
// busy longer is down, and the call returns its last error.
const (
	busyMin, busyMax = 5 * time.Millisecond, 250 * time.Millisecond
	busyLimit        = 15 * time.Second
)

// busy reports an error reply by which a Cluster refused to run a command
// for now: TRYAGAIN, ASK, MOVED or CLUSTERDOWN.
func busy(err error) bool {
	if err == nil {
		return false
	}
	for _, p := range [...]string{"TRYAGAIN", "CLUSTERDOWN", "MOVED", "ASK"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// retryBusy runs f, and again while it fails with a transient error, ctx
// is live and less than busyLimit has passed, sleeping between attempts
// with backoff and jitter. It returns f's last result, its error joined
// with ctx's when ctx ended the retries.
func retryBusy[T any](c *Client, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	give := time.Now().Add(busyLimit)
	b := backoff{next: busyMin, max: busyMax, jitter: true}
	for {
		v, err := f(ctx)
		if !c.be.transient(err) {
			return v, err
		}
		c.be.reload(ctx)
		d := b.delay()
		if time.Now().Add(d).After(give) {
			return v, err
		}
		c.debug("reentrant: the cluster asks to try again", "err", err, "delay", d)
		if !sleep(ctx.Done(), d) {
			return v, join(ctx.Err(), err)
		}
	}
}

// backoff is the schedule of every retry loop of the package: delays that
// double from next up to max, each drawn from [d/2, d] with jitter.
type backoff struct {
	next, max time.Duration
	jitter    bool
}

// delay returns the next delay and doubles the one after.
func (b *backoff) delay() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.max)
	if b.jitter {
		d = d/2 + rand.N(d/2+1)
	}
	return d
}

// sleep waits d, and reports false, at once, if done is closed first.
func sleep(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C:
		return true
	}
}

// What the two Redis backends (single and quorum) share: the keys of a
// lock, the request the scripts see, and their replies as the Client's own.

// redisCall is a lock call of a Redis backend: the call, and its lock's
// keys, made once. Each backend's state of a call starts with it.
type redisCall struct {
	call
	keys scripts.Keys
}

// init makes rc the call r of a lock under prefix, whose backend state is
// be (the struct rc is part of), and returns the call.
func (rc *redisCall) init(r call, prefix string, be any) *call {
	rc.call, rc.keys = r, scripts.KeysFor(prefix, r.name)
	rc.ref = lockRef{name: r.name, keys: &rc.keys}
	rc.be = be
	return &rc.call
}

// keysOf returns the keys of ref's lock under prefix: those a call made
// once, or, for a lockRef{name}, made now.
func keysOf(ref lockRef, prefix string) scripts.Keys {
	if k, ok := ref.keys.(*scripts.Keys); ok {
		return *k
	}
	return scripts.KeysFor(prefix, ref.name)
}

// tokensOf is how the scripts issue a fresh token for a client of cfg.
func tokensOf(cfg config) scripts.Tokens {
	return scripts.Tokens{Time: cfg.timeTokens, Idle: cfg.counterIdle}
}

// requestOf is r's acquisition as the scripts see it, without a queue.
func requestOf(r *call, t scripts.Tokens) scripts.Request {
	return scripts.Request{Owner: string(r.owner), Level: r.level, TTL: r.cfg.ttl, Meta: r.cfg.meta,
		MaxDepth: r.cfg.maxDepth, Tokens: t}
}

// acquiredOf is the acquire script's reply as a grant or a refusal.
func acquiredOf(a scripts.Acquired) acquired {
	return acquired{ok: a.OK, token: a.Token, depth: a.Depth, holderTTL: a.HolderTTL}
}

// prepared returns the renewals' script requests, made once for each
// extendReq and kept in its prep.
func prepared(reqs []*extendReq, prefix string) []scripts.ExtendReq {
	out := make([]scripts.ExtendReq, len(reqs))
	for i, r := range reqs {
		p, ok := r.prep.(*scripts.ExtendReq)
		if !ok {
			x := scripts.NewExtendReq(keysOf(r.ref, prefix), string(r.owner), r.token, r.ttl)
			p = &x
			r.prep = p
		}
		out[i] = *p
	}
	return out
}

// extendResults are the renewals' replies as the Client's own.
func extendResults(res []scripts.ExtendResult) []extendResult {
	out := make([]extendResult, len(res))
	for i, r := range res {
		out[i] = extendResult{held: r.Held, sent: r.Sent, err: r.Err}
	}
	return out
}

// forceResultOf is the force script's reply as the Client's own.
func forceResultOf(r scripts.ForceResult) forceResult {
	return forceResult{ended: r.Ended, repeat: r.Repeat, holder: r.Holder}
}
