//go:build unix

package jepsen_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
)

// Failover under Sentinel: a primary, two replicas and three real
// sentinels; holders lock a few names through go-redis's FailoverClient and
// write through fenced stores (in memory, so they outlive the failover).
// The primary is SIGKILLed mid-run; Sentinel promotes a replica and the
// holders go on with the new primary. Run in both token modes, with and
// without reentrant.WithReplicaAck(1, ...).
//
// What must hold: no stale write accepted, and every name acquired again
// after every kill. With time tokens or with the acknowledgement no token
// may repeat. Without either, a token repeats only when the primary died
// between an INCR and its replication, a window of microseconds on
// loopback: the figures say how often that was hit.
//
// behind/... widens that window on purpose: the replicas are isolated
// (redisproc's Isolate) for a while before the kill, so the primary issues
// tokens no replica has. With the strict counter tokens must then repeat;
// with the acknowledgement the acquisitions made meanwhile must be refused
// (ErrNotReplicated) and none repeat.
func TestSentinelFailover(t *testing.T) {
	for _, behind := range []bool{false, true} {
		for _, mode := range faultTokenModes {
			if behind && mode.time() {
				continue // TestFaultFailover already shows time tokens there
			}
			for _, ack := range []bool{false, true} {
				name, scenario := mode.name, "sentinel"
				if behind {
					name, scenario = "behind/"+name, scenario+"-behind"
				}
				if ack {
					name, scenario = name+"/ack", scenario+"-ack"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel() // see TestMain
					runSentinelFailover(t, scenario+mode.suffix, mode, ack, behind)
				})
			}
		}
	}
}

// sentinelAckTimeout bounds WAIT with WithReplicaAck: replicas on loopback
// answer within a millisecond, unless one is resyncing after a failover.
const sentinelAckTimeout = 500 * time.Millisecond

func runSentinelFailover(t *testing.T, scenario string, mode faultTokenMode, ack, behind bool) {
	kills, names, warm, after := 1, 2, 2*time.Second, 3*time.Second
	if faultLong() {
		kills, names, warm, after = 3, 3, 3*time.Second, 4*time.Second
	}
	g := redisproc.StartSentinels(t, 2, 3)
	cfg := faultWorkersSize()
	cfg.lockOpts = mode.opts
	readTimeout := faultRedisOptions("").ReadTimeout
	if ack {
		cfg.lockOpts = append(slices.Clone(mode.opts), reentrant.WithReplicaAck(1, sentinelAckTimeout))
		// A refusal takes sentinelAckTimeout; a Lock that waited a while
		// in the queue must still outwait it, or it ends as a timeout.
		cfg.lockWait = sentinelAckTimeout + 3*time.Second
		readTimeout = sentinelAckTimeout + 500*time.Millisecond // New checks it outlasts WAIT
	}
	client := func(int) redis.UniversalClient {
		return g.Client(func(o *redis.FailoverOptions) {
			f := faultRedisOptions("")
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout = f.DialTimeout, readTimeout, f.WriteTimeout
			o.PoolTimeout, o.MaxRetries, o.ContextTimeoutEnabled = f.PoolTimeout, f.MaxRetries, f.ContextTimeoutEnabled
		})
	}
	groups := make([]*faultWorkers, names)
	stores := make([]storage.Store, names)
	for i := range groups {
		stores[i] = memory.New()
		groups[i] = faultStartWorkers(t, cfg, client, stores[i])
	}

	var run sentinelRun
	time.Sleep(warm)
	for k := range kills {
		run.kill(t, g, groups, behind, ack, after)
		if k < kills-1 {
			g.Rejoin(run.killed) // two replicas again before the next kill
		}
	}
	g.AwaitPrimary()
	run.unplanned = g.Unplanned()

	var rs []faultReport
	for i, w := range groups {
		ops := w.stop(t)
		run.leasesLost += sentinelLeasesLost(ops)
		rs = append(rs, faultCheck(fmt.Sprintf("%s/%d", scenario, i), ops, faultFinal(t, stores[i], w.keys)))
	}
	r := faultRecord(t, faultMerge(scenario, rs))
	t.Logf("SENTINEL scenario=%s kills=%d unplanned_failovers=%d acquisitions=%d not_replicated=%d overlaps=%d tokens_repeated=%d stale_accepted=%d leases_lost=%d unknown=%d fenced_out=%d failover_ms=%v resume_ms=%v",
		scenario, run.kills, run.unplanned, r.Acquisitions, r.NotReplicated, r.MutexViolations, r.TokensRepeated, r.StaleAccepted,
		run.leasesLost, r.Unknown, r.FencedOut, sentinelMillis(run.failover), sentinelMillis(run.resume))
	if (ack || mode.time()) && r.TokensRepeated != 0 {
		t.Errorf("tokens %v were issued twice", r.Repeated)
	}
	switch {
	case behind && ack && r.NotReplicated == 0:
		t.Errorf("no acquisition was refused with ErrNotReplicated while the replicas were isolated")
	case behind && !ack && r.TokensRepeated == 0:
		t.Errorf("no token repeated after promoting a replica that missed the primary's last tokens")
	}
}

// sentinelRun is what one run measured besides the oracle's figures.
type sentinelRun struct {
	kills      int
	unplanned  int             // failovers Sentinel made on its own (redisproc.Sentinels.Unplanned)
	failover   []time.Duration // kill to every sentinel naming the new primary
	resume     []time.Duration // kill to every name granted again
	leasesLost int             // unlocks whose lease had reported itself lost
	killed     *redisproc.Server
}

// kill kills the primary once the group is settled (every sentinel agrees
// on it, every replica is in sync), first isolating the replicas when
// behind, and waits, at least after, until every group's name was acquired
// again.
//
// The isolation lasts until what the run checks has happened in it: a
// holder granted a token the replicas miss (without the acknowledgement),
// or refused with ErrNotReplicated (with it); a loaded machine can let a
// fixed isolation pass without either.
func (run *sentinelRun) kill(t *testing.T, g *redisproc.Sentinels, groups []*faultWorkers, behind, ack bool, after time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	g.WaitReplicas(ctx)
	old := g.Primary()
	var isolated []*redisproc.Server
	if behind {
		isolated = g.Replicas()
		for _, r := range isolated {
			r.Isolate()
		}
		from := faultNow()
		happened := func() bool {
			for _, w := range groups {
				if slices.ContainsFunc(w.hist.snapshot(), func(op faultOp) bool {
					return op.Kind == faultLock && op.Start > from &&
						(ack && op.Outcome == faultNotReplicated || !ack && op.Outcome == faultOK)
				}) {
					return true
				}
			}
			return false
		}
		// Each wait is longer than a section plus the acknowledgement
		// timeout, so that acquisitions begun meanwhile end before the
		// kill.
		for end := time.Now().Add(time.Minute); ; {
			time.Sleep(sentinelAckTimeout + time.Second)
			if happened() || time.Now().After(end) {
				break
			}
		}
	}
	old.Kill()
	killed := faultNow()
	for _, r := range isolated {
		r.Resume()
	}
	g.AwaitFailover(old)
	run.failover = append(run.failover, time.Duration(faultNow()-killed))
	run.kills++
	run.killed = old
	// Every name must be granted again, by the new primary: the old one
	// was dead before killed.
	resumed := func() (int64, bool) {
		var last int64
		for _, w := range groups {
			at, ok := sentinelFirstGrant(w.hist.snapshot(), killed)
			if !ok {
				return 0, false
			}
			last = max(last, at)
		}
		return last, true
	}
	start := time.Now()
	for {
		at, ok := resumed()
		if ok && time.Since(start) >= after {
			run.resume = append(run.resume, time.Duration(at-killed))
			return
		}
		if time.Since(start) > time.Minute {
			t.Errorf("kill %d: some name was not acquired again within a minute of the failover", run.kills)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sentinelFirstGrant returns when the first acquisition that started after
// at completed.
func sentinelFirstGrant(ops []faultOp, at int64) (int64, bool) {
	var first int64
	for _, op := range ops {
		if op.Kind == faultLock && op.Outcome == faultOK && op.Start > at && (first == 0 || op.End < first) {
			first = op.End
		}
	}
	return first, first != 0
}

// sentinelLeasesLost counts the unlocks whose lease was lost first.
func sentinelLeasesLost(ops []faultOp) int {
	n := 0
	for _, op := range ops {
		if op.Kind == faultUnlock && (op.LostAt > 0 || op.Outcome == faultNotHeld) {
			n++
		}
	}
	return n
}

func sentinelMillis(ds []time.Duration) []int64 {
	ms := make([]int64, len(ds))
	for i, d := range ds {
		ms[i] = d.Milliseconds()
	}
	return ms
}
