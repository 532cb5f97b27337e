package reentrant

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
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

// retryBusy runs f, and again while it fails with a transient error, ctx
// is live and less than busyLimit has passed, sleeping between attempts
// with backoff and jitter. It returns f's last result, its error joined
// with ctx's when ctx ended the retries.
func retryBusy[T any](c *Client, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	give := time.Now().Add(busyLimit)
	for delay := busyMin; ; delay = min(2*delay, busyMax) {
		v, err := f(ctx)
		if !c.be.transient(err) {
			return v, err
		}
		c.be.reload(ctx)
		d := delay/2 + rand.N(delay/2+1)
		if time.Now().Add(d).After(give) {
			return v, err
		}
		c.debug("reentrant: the cluster asks to try again", "err", err, "delay", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, join(ctx.Err(), err)
		case <-t.C:
		}
	}
}
