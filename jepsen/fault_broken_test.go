//go:build unix

package jepsen_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
)

// faultBrokenStore is deliberately wrong: it raises a write's token to the
// store's highest before writing, so the fencing check always passes and a
// paused holder's late write lands. It exists to show the oracle can fail.
type faultBrokenStore struct{ storage.Store }

var _ storage.Store = (*faultBrokenStore)(nil)

// Put writes value with max(token, highest): never refused as stale.
func (b *faultBrokenStore) Put(ctx context.Context, key string, value []byte, token fence.Token) error {
	h, err := b.Highest(ctx, key)
	if err != nil {
		return err
	}
	return b.Store.Put(ctx, key, value, max(h, token))
}

// The client-pause scenario against the broken store: the paused holder's
// late writes are accepted, and the oracle must say so.
func TestFaultOracleCatchesBrokenStore(t *testing.T) {
	run := runFaultPause(t, "broken")
	r := faultCheck("client-pause/BROKEN-store", run.ops, run.final)
	t.Logf("%s (a broken store: stale writes accepted are expected here)", r)
	faultKeep(r)
	if r.StaleAccepted == 0 {
		t.Fatalf("the oracle found no stale write accepted by a store that accepts every write:\n%s", r)
	}
}

// The oracle's rules on small hand-made histories, through the reference
// store and the broken one.
func TestFaultOracleRules(t *testing.T) {
	ctx := t.Context()
	put := func(s storage.Store, h *faultHistory, proc int, value string, tok uint64, at int64) {
		err := s.Put(ctx, "k", []byte(value), fence.Token(tok))
		h.add(faultOp{Proc: proc, Kind: faultWrite, Key: "k", Value: value, Token: tok,
			Outcome: faultOutcome(faultWrite, err), Start: at, End: at + 1})
	}
	lock := func(h *faultHistory, proc int, tok uint64, at int64) {
		h.add(faultOp{Proc: proc, Kind: faultLock, Token: tok, Outcome: faultOK, Start: at, End: at + 1})
	}
	history := func(s storage.Store) faultReport {
		h := &faultHistory{}
		lock(h, 1, 1, 0)
		put(s, h, 1, "one", 1, 10)
		lock(h, 2, 2, 20) // holder 1 never unlocked: it overlaps holder 2
		put(s, h, 2, "two", 2, 30)
		put(s, h, 1, "one-late", 1, 40)
		return faultCheck("rules", h.snapshot(), faultFinal(t, s, []string{"k"}))
	}

	good := history(memory.New())
	if good.StaleAccepted != 0 || len(good.Anomalies) != 0 || good.Refused != 1 || good.MutexViolations != 1 {
		t.Errorf("reference store: %s %v", good, good.Anomalies)
	}
	bad := history(&faultBrokenStore{Store: memory.New()})
	if bad.StaleAccepted != 1 {
		t.Errorf("broken store: %s, want 1 stale write accepted", bad)
	}
	if len(bad.Anomalies) == 0 {
		t.Errorf("broken store: its final record (one-late under token 2) matches no write, want an anomaly")
	}

	// A counter that went backwards: the second holder's token 1 repeats,
	// and its refused write is the liveness cost.
	h := &faultHistory{}
	s := memory.New()
	lock(h, 1, 5, 0)
	put(s, h, 1, "five", 5, 10)
	h.add(faultOp{Proc: 1, Kind: faultUnlock, Token: 5, Outcome: faultOK, Start: 15, End: 16})
	lock(h, 2, 1, 20)
	lock(h, 3, 1, 21)
	put(s, h, 2, "one", 1, 30)
	r := faultCheck("backwards", h.snapshot(), faultFinal(t, s, []string{"k"}))
	if r.TokensRepeated != 1 || r.FencedOut != 1 || r.StaleAccepted != 0 || len(r.Anomalies) != 0 {
		t.Errorf("backwards counter: %s %v", r, r.Anomalies)
	}

	// An acquisition undone for want of replica acknowledgements handed
	// out no token: it is counted as such, neither acquired nor unknown.
	h = &faultHistory{}
	notReplicated := fmt.Errorf("reentrant: lock %q: %w", "n", reentrant.ErrNotReplicated)
	h.add(faultOp{Proc: 1, Kind: faultLock, Outcome: faultOutcome(faultLock, notReplicated), Start: 0, End: 1})
	r = faultCheck("not-replicated", h.snapshot(), nil)
	if r.NotReplicated != 1 || r.Acquisitions != 0 || r.Unknown != 0 {
		t.Errorf("a lock refused with ErrNotReplicated: %s", r)
	}

	// An unexplained refusal and a lost write are anomalies.
	h = &faultHistory{}
	h.add(faultOp{Proc: 1, Kind: faultWrite, Key: "k", Value: "x", Token: 3, Outcome: faultStale, Start: 0, End: 1})
	h.add(faultOp{Proc: 1, Kind: faultWrite, Key: "k", Value: "y", Token: 4, Outcome: faultOK, Start: 2, End: 3})
	h.add(faultOp{Proc: 1, Kind: faultWrite, Key: "k", Value: "z", Token: 4, Outcome: faultOK, Start: 4, End: 5})
	r = faultCheck("anomalies", h.snapshot(), map[string]*storage.Record{"k": {Value: []byte("y"), Token: 4}})
	if len(r.Anomalies) != 2 {
		t.Errorf("want an unexplained refusal and a lost write, got %v", r.Anomalies)
	}
}
