package reentrant

// The single backend's retries: a Cluster that refuses a command for now is
// sent it again; and what an error says of whether a script ran.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/scripts"
)

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

// retryBusy runs f, and again while it fails with a transient error, ctx
// is live and less than busyLimit has passed, sleeping between attempts
// with backoff and jitter. It returns f's last result, its error joined
// with ctx's when ctx ended the retries.
func retryBusy[T any](s *single, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	give := time.Now().Add(busyLimit)
	b := backoff{next: busyMin, max: busyMax, jitter: true}
	for {
		v, err := f(ctx)
		if !s.transient(err) {
			return v, err
		}
		s.reload(ctx)
		d := b.delay()
		if time.Now().Add(d).After(give) {
			return v, err
		}
		s.c.debug("reentrant: the cluster asks to try again", "err", err, "delay", d)
		if !sleep(ctx.Done(), d) {
			return v, join(ctx.Err(), err)
		}
	}
}

// resendBusy sends anew, with backoff, the renewals a Cluster refused for now
// (see retryBusy), until each gets another answer or ctx ends, and puts the
// new outcomes in res.
func (s *single) resendBusy(ctx context.Context, reqs []scripts.ExtendReq, res []scripts.ExtendResult) {
	b := backoff{next: busyMin, max: busyMax}
	for {
		var idx []int
		for i := range res {
			if s.transient(res[i].Err) {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			return
		}
		s.reload(ctx)
		if !sleep(ctx.Done(), b.delay()) {
			return
		}
		retry := make([]scripts.ExtendReq, len(idx))
		for j, i := range idx {
			retry[j] = reqs[i]
		}
		for j, x := range scripts.ExtendBatch(ctx, s.rdb, retry) {
			res[idx[j]] = x
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

// ran is mayHaveRun that also counts as not run a call during which the
// client wrote nothing to Redis (see sendWatch), which proves
// what go-redis's final error cannot once it retries: that no attempt
// reached Redis. m was marked before the call.
func (c *Client) ran(err error, retries bool, m sendMark) bool {
	if !mayHaveRun(err, retries) {
		return false
	}
	var granted *grantedError
	return err == nil || errors.As(err, &granted) || !c.watch.sentNothing(m)
}

// unknown is the error of a call of c that changes a held lock (a release, an
// extension, a resignation) and failed with out: ErrOutcomeUnknown, saying
// what to do (hint), when its command may have run with no reply to say
// so, and out's error as it is otherwise. m was marked before the call.
func unknown[T any](c *Client, out outcome[T], m sendMark, hint string) error {
	switch {
	case out.ended && !out.known:
		return fmt.Errorf("%w: %w before Redis answered; %s", ErrOutcomeUnknown, out.err, hint)
	case c.ran(out.err, c.retries, m):
		return fmt.Errorf("%w (%w); %s", ErrOutcomeUnknown, out.err, hint)
	}
	return out.err
}

// neverSent reports errors raised before a command could reach the server:
// no connection could be made, the pool had none to give, or the client was
// closed.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed)
}
