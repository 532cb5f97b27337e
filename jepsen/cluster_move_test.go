//go:build unix

package jepsen_test

import (
	"context"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/tuning"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/redisstore"
)

// Scenario cluster-move: a slot moves from primary to primary, its keys one
// MIGRATE at a time, while holders lock and unlock three names in it and
// write, fenced, to a Redis store on the same cluster whose records share
// the slot; meanwhile a fourth name in the slot stays held (renewed across
// every move) with a waiter queued on it.
//
// While the slot moves, the cluster answers the lock scripts TRYAGAIN (a
// lock's hash and queue split, or its queue missing on the node asked) and
// ASK; the client must retry them, so no caller sees one. The keys move
// with MIGRATE, which neither loses nor repeats a write, so tokens never
// repeat, no two holders overlap, and the store accepts no stale write.
// The held lock survives, and its waiter gets it when it is released.
func TestClusterSlotMove(t *testing.T) {
	moves, pause := 3, 40*time.Millisecond
	if faultLong() {
		moves = 9
	}
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{})
	names, slot := clusterSlotNames(t, 4)
	heldName, names := names[0], names[1:]
	store, err := redisstore.New(c.Client(clusterHolderOptions), redisstore.WithPrefix("redfence"))
	if err != nil {
		t.Fatal(err)
	}
	// A section longer than a move: the moves come in the middle of
	// sections, and of the waits for them.
	cfg := faultWorkersConfig{workers: 3, steps: 5, gap: 40 * time.Millisecond, ttl: time.Second,
		lockWait: 3 * time.Second, opTimeout: 2 * time.Second}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	held, waited := clusterHoldAndWait(t, ctx, c, heldName, tuning.HandoffTimeout(4*time.Second).(reentrant.ClientOption))

	w := clusterStartWorkers(t, c, names, cfg.workers, cfg, store)
	time.Sleep(500 * time.Millisecond)
	var moved redisproc.MigrateStats
	for i := range moves {
		from := c.MasterOf(slot)
		masters := c.Masters()
		to := masters[0]
		for j, m := range masters {
			if m == from {
				to = masters[(j+1)%len(masters)]
			}
		}
		st := c.MigrateSlot(slot, to, 1, pause)
		t.Logf("move %d of slot %d: %s -> %s, %d keys in %d batches, %v", i+1, slot, from.Addr(), to.Addr(), st.Keys, st.Batches, st.Took)
		moved.Keys += st.Keys
		moved.Batches += st.Batches
		moved.Took += st.Took
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	w.awaitGrant(t, 0) // the run must have acquisitions to prove anything
	all := w.stop(t)

	var tally clusterTally
	final := faultFinal(t, store, names)
	for i, name := range names {
		r := faultRecord(t, faultCheck("cluster-move/"+[...]string{"a", "b", "c"}[i], all[name], map[string]*storage.Record{name: final[name]}))
		tally.add(r, all[name])
	}

	// The held lock: alive across every move, then handed to its waiter.
	heldErr := held.Err()
	start := faultNow()
	if err := held.Unlock(ctx); err != nil {
		t.Errorf("unlock of the lock held across the moves: %v", err)
	}
	var handoff time.Duration
	select {
	case g := <-waited:
		handoff = time.Duration(g.at - start)
		switch {
		case g.err != nil:
			t.Errorf("the waiter queued across the moves: %v", g.err)
		case g.l.Token() <= held.Token():
			t.Errorf("the waiter got token %d after %d", g.l.Token(), held.Token())
		default:
			_ = g.l.Unlock(ctx)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the waiter queued across the moves got nothing within 30 s")
	}
	t.Logf("SUMMARY cluster-move moves=%d keys_moved=%d batches=%d migrate_ms=%d names=%d holders=%d %s %s held_lease_err=%v held_handoff_ms=%.1f",
		moves, moved.Keys, moved.Batches, moved.Took.Milliseconds(), len(names), len(names)*cfg.workers, &tally,
		&w.replies, heldErr, float64(handoff)/1e6)
	if heldErr != nil {
		t.Errorf("the lease held across the moves ended: %v", heldErr)
	}
	if n := tally.busyErrors(); n != 0 {
		t.Errorf("callers saw %d TRYAGAIN/ASK/MOVED errors: %v", n, tally.errs)
	}
	if tally.MutexViolations != 0 || tally.TokensRepeated != 0 {
		t.Errorf("a slot move must not break mutual exclusion or repeat tokens: %s", &tally)
	}
	if tally.Acquisitions == 0 {
		t.Errorf("no acquisition: the run proves nothing")
	}
}
