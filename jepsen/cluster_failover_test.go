//go:build unix

package jepsen_test

import (
	"context"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage/memory"
)

// Scenario cluster-failover: a primary of a three-primary cluster (one
// replica each, cluster-node-timeout 1 s) fails over while holders lock and
// unlock two names it serves and one another primary serves, writing
// fenced to a memory store; a fifth lock on the failing primary is held
// across the failover with a waiter queued on it.
//
//   - graceful: CLUSTER FAILOVER on the replica. The primary stops taking
//     writes until the replica has them all, so nothing is lost: no token
//     repeats, no lease is lost, and clients follow the MOVED replies.
//   - sigkill: SIGKILL of the primary. Until its replica is elected (the
//     node timeout, then the election: about 2 s) the cluster answers
//     CLUSTERDOWN on every slot, and the killed node's slots refuse
//     connections; leases shorter than that are lost, waiters wait, and a
//     write acknowledged but not yet replicated would be lost with it
//     (tokens repeat, and the fenced store refuses the repeated holders'
//     writes). No stale write may be accepted either way.
func TestClusterFailover(t *testing.T) {
	for _, kind := range []string{"graceful", "sigkill"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // see TestMain
			runClusterFailover(t, kind)
		})
	}
}

func runClusterFailover(t *testing.T, kind string) {
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{Replicas: 1, NodeTimeout: time.Second})
	masters := c.Masters()
	m := masters[0]
	names := []string{clusterNameOn(t, c, m), clusterNameOn(t, c, m), clusterNameOn(t, c, masters[1])}
	heldName := clusterNameOn(t, c, m)
	store := memory.New()
	cfg := faultWorkersSize()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	held, waited := clusterHoldAndWait(t, ctx, c, heldName, reentrant.WithTTL(600*time.Millisecond))

	before, after := 800*time.Millisecond, 1500*time.Millisecond
	if faultLong() {
		before, after = 3*time.Second, 6*time.Second
	}
	w := clusterStartWorkers(t, c, names, cfg.workers, cfg, store)
	time.Sleep(before)
	replica := c.ReplicasOf(m)[0]
	at := faultNow()
	var took time.Duration
	var promoted *redisproc.Server
	if kind == "graceful" {
		took, promoted = c.Failover(replica), replica
	} else {
		promoted, took = c.KillMaster(m)
	}
	settled := faultNow()
	time.Sleep(after)
	w.awaitGrant(t, settled) // checked below; a loaded machine can take longer than after
	all := w.stop(t)

	var tally clusterTally
	acquired := 0
	for i, name := range names {
		label := [...]string{"a", "b", "other"}[i]
		// Each name's holders write to the key of the same name: its final
		// record must be the highest accepted write.
		r := faultRecord(t, faultCheck("cluster-failover/"+kind+"/"+label, all[name], faultFinal(t, store, []string{name})))
		tally.add(r, all[name])
		for _, op := range all[name] {
			if op.Kind == faultLock && op.Outcome == faultOK && op.Start > settled {
				acquired++
			}
		}
	}
	heldErr := held.Err()
	released := faultNow()
	_ = held.Unlock(ctx)
	var waiter string
	select {
	case g := <-waited:
		switch {
		case g.err != nil:
			waiter = "failed: " + g.err.Error()
		case g.at < released:
			waiter = "acquired " + time.Duration(g.at-at).Round(time.Millisecond).String() + " after the event, token " + g.l.Token().String()
		default:
			waiter = "acquired " + time.Duration(g.at-released).Round(time.Millisecond).String() + " after the release, token " + g.l.Token().String()
		}
		if g.l != nil {
			_ = g.l.Unlock(ctx)
		}
		if g.err != nil {
			t.Errorf("the held lock's waiter: %v", g.err)
		}
	case <-time.After(30 * time.Second):
		waiter = "still waiting 30s after the release"
		t.Errorf("the held lock's waiter never got it")
	}
	t.Logf("SUMMARY cluster-failover kind=%s took_ms=%d promoted=%s names=%d holders=%d %s %s acquisitions_after=%d",
		kind, took.Milliseconds(), promoted.Addr(), len(names), len(names)*cfg.workers, &tally, &w.replies, acquired)
	t.Logf("cluster-failover/%s: the lock held across it: %v; its waiter: %s", kind, leaseState(heldErr), waiter)
	if acquired == 0 {
		t.Errorf("no acquisition after the cluster settled")
	}
	if n := tally.busyErrors(); n != 0 {
		t.Errorf("callers saw %d TRYAGAIN/ASK/MOVED errors: %v", n, tally.errs)
	}
	if kind == "graceful" && (tally.TokensRepeated != 0 || heldErr != nil) {
		t.Errorf("a graceful failover loses nothing: tokens repeated %d, held lease %v", tally.TokensRepeated, heldErr)
	}
}

func leaseState(err error) string {
	if err == nil {
		return "still held"
	}
	return "lost (" + err.Error() + ")"
}
