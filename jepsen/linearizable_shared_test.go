// Same-owner interleavings under retried replies: two workers act for one
// owner, through a proxy that holds replies past go-redis's read timeout so
// that calls are retried after the partner has reentered or released.

package jepsen_test

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/redfence/redfence/internal/testkit/netfault"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/jepsen/internal/history"
	"github.com/redfence/redfence/storage/memory"
)

// linSharedOwnerRun runs the lock workload with workers paired on owners,
// through a chaotic proxy, on the Redis behind b, and returns the lock
// history and the proxy's delayed-reply count.
func linSharedOwnerRun(t *testing.T, b testenv.Backend, ops int) (linLockRun, int64) {
	workers, _ := linScale()
	p, err := netfault.New(b.Client.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c := linFaultyClient(t, p, 3) // go-redis retries, as by default
	// Hold a reply past the read timeout every few milliseconds: go-redis
	// then re-sends the call, often after the partner's next step.
	stop := linEvery(20*time.Millisecond, func() { p.DelayNext(netfault.Downstream, 150*time.Millisecond) })
	w := linLockWorld{rdb: c, store: memory.New(), names: linLockNames(t), opTimeout: 300 * time.Millisecond, sharedOwners: true}
	run := linRunLocks(t, w, workers, ops)
	stop()
	t.Logf("proxy %+v", p.Stats())
	return run, p.Stats().Delayed[netfault.Downstream]
}

// TestLinearizableSharedOwnersUnderRetries: with the partner reentering and
// releasing between a call's attempts, every release still takes exactly
// its own level, so the history is linearizable.
func TestLinearizableSharedOwnersUnderRetries(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		_, ops := linScale()
		run, delayed := linSharedOwnerRun(t, b, ops)
		// On a saturated machine most calls time out behind the proxy's
		// delays, and a history of mostly unknown outcomes can outgrow
		// the checker's time: an inconclusive check (never a violation)
		// is run again on a smaller history, twice at most.
		for attempt := 1; attempt < 3; attempt++ {
			r := history.Check(history.LockModel(), run.locks.Operations(), linCheckTimeout)
			if r.Verdict != porcupine.Unknown {
				break
			}
			ops /= 2
			t.Logf("attempt %d: the check was inconclusive (%v); running again with %d ops", attempt, r, ops)
			run, delayed = linSharedOwnerRun(t, b, ops)
		}
		n := linCheck(t, "lock", run.locks, history.LockModel())
		if delayed == 0 || n.OK == 0 {
			t.Errorf("%v with %d delayed replies: the run must grant and must delay replies", n, delayed)
		}
		if d := linMaxDepth(run.locks.Operations()); d < 2 {
			t.Errorf("deepest reentry %d: the shared owners never reentered", d)
		}
	})
}
