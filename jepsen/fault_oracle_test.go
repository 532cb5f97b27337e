//go:build unix

package jepsen_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
)

// faultLong reports whether the long versions were asked for with
// REDFENCE_LONG=1: more holders, more rounds, longer faults.
func faultLong() bool { return os.Getenv("REDFENCE_LONG") == "1" }

// faultNow reads CLOCK_MONOTONIC, which every process on the machine shares
// (Go's own monotonic readings are relative to each process's start), so
// the operations of re-executed holder processes and of the test can be
// ordered on one clock.
func faultNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // CLOCK_MONOTONIC is always there on the systems we run on
	}
	return ts.Nano()
}

// Operation kinds and outcomes of a faultOp.
const (
	faultLock   = "lock"
	faultWrite  = "write"
	faultUnlock = "unlock"

	faultOK      = "ok"       // lock acquired, write accepted, unlock done
	faultStale   = "stale"    // write refused with fence.ErrStale
	faultFailed  = "failed"   // definitely not applied (lock not acquired in time)
	faultNotHeld = "not_held" // unlock found the lease gone
	faultUnknown = "unknown"  // timeout, reset, server gone: may or may not have happened
)

// faultOp is one call as its caller saw it. Holder processes print these as
// JSON lines; in-process workers append them to a faultHistory. Times are
// CLOCK_MONOTONIC nanoseconds (see faultNow); Wall is the Unix time at
// Start, for people reading the logs.
type faultOp struct {
	Proc    int    `json:"proc"`
	Kind    string `json:"kind"`
	Key     string `json:"key,omitempty"`
	Value   string `json:"value,omitempty"`
	Token   uint64 `json:"token,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	Err     string `json:"err,omitempty"`
	Start   int64  `json:"start"`
	End     int64  `json:"end"`
	Wall    int64  `json:"wall"`
	// LostAt is, for an unlock, when the lease's context reported the
	// lease lost (0 if it never did): the holder stopped believing it held
	// the lock then, or at the unlock's Start, whichever came first.
	LostAt int64 `json:"lost_at,omitempty"`
	// AfterLoss marks a write made although the lease had already reported
	// itself lost: the holders here write regardless, like a client that
	// never checks, because that is the write fencing exists for.
	AfterLoss bool `json:"after_loss,omitempty"`
}

// faultOutcome classifies an error from a lock, write or unlock call.
func faultOutcome(kind string, err error) string {
	switch {
	case err == nil:
		return faultOK
	case kind == faultWrite && errors.Is(err, fence.ErrStale):
		return faultStale
	case kind == faultLock && errors.Is(err, reentrant.ErrNotAcquired):
		// Held by another, or the wait ran out. An acquire in flight at
		// that moment may still have run, but its lease was never handed
		// out: it expires after one TTL, like a crashed holder's.
		return faultFailed
	case kind == faultUnlock && errors.Is(err, reentrant.ErrNotHeld):
		return faultNotHeld
	}
	return faultUnknown
}

// faultHistory collects operations from several goroutines.
type faultHistory struct {
	mu  sync.Mutex
	ops []faultOp
}

func (h *faultHistory) add(op faultOp) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

func (h *faultHistory) snapshot() []faultOp {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

// faultReport is one scenario's figures.
type faultReport struct {
	Scenario     string
	Ops          int // lock, write and unlock calls
	Acquisitions int // locks acquired
	Accepted     int // writes accepted
	Refused      int // writes refused with fence.ErrStale
	// MutexViolations counts pairs of holders that believed they held the
	// lock at overlapping times. Expected under pauses: fencing is what
	// keeps them from doing harm.
	MutexViolations int
	// StaleAccepted counts accepted writes carrying a token below one the
	// store had already accepted for the key. Must be 0.
	StaleAccepted int
	Unknown       int // calls whose outcome is unknown
	// TokensRepeated counts acquisitions handed a token an earlier
	// acquisition already had: the counter went backwards.
	TokensRepeated int
	// FencedOut counts writes refused because their holder's token went
	// backwards (repeated or below one issued earlier): the liveness cost
	// of a counter that forgot, not a safety loss.
	FencedOut  int
	AfterLoss  int      // writes made after the lease reported itself lost
	Repeated   []uint64 // the repeated tokens, ascending
	Anomalies  []string // oracle findings other than stale writes; must be empty
	Highest    uint64   // highest token accepted by the store
	FinalToken uint64   // token of the final record of the first key
}

// String is the report's one-line summary.
func (r faultReport) String() string {
	return fmt.Sprintf("%s: ops=%d acquisitions=%d accepted=%d refused=%d mutex_violations=%d stale_accepted=%d unknown=%d tokens_repeated=%d fenced_out=%d writes_after_loss=%d highest=%d",
		r.Scenario, r.Ops, r.Acquisitions, r.Accepted, r.Refused, r.MutexViolations, r.StaleAccepted, r.Unknown, r.TokensRepeated, r.FencedOut, r.AfterLoss, r.Highest)
}

// faultTable formats reports as an aligned table.
func faultTable(rs []faultReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-34s %6s %5s %6s %6s %6s %6s %6s %6s %6s\n",
		"scenario", "ops", "acq", "accept", "refuse", "mutex", "STALE", "unknwn", "repeat", "fenced")
	for _, r := range rs {
		fmt.Fprintf(&b, "%-34s %6d %5d %6d %6d %6d %6d %6d %6d %6d\n",
			r.Scenario, r.Ops, r.Acquisitions, r.Accepted, r.Refused, r.MutexViolations, r.StaleAccepted, r.Unknown, r.TokensRepeated, r.FencedOut)
	}
	return b.String()
}

// faultReports collects every report of the run for TestFaultSummary.
var faultReports struct {
	mu sync.Mutex
	rs []faultReport
}

// faultKeep keeps r for TestFaultSummary's table.
func faultKeep(r faultReport) {
	faultReports.mu.Lock()
	defer faultReports.mu.Unlock()
	faultReports.rs = append(faultReports.rs, r)
}

// faultRecord logs r, keeps it for the summary and fails t if the oracle
// found a stale write accepted or another anomaly.
func faultRecord(t *testing.T, r faultReport) faultReport {
	t.Helper()
	t.Log(r.String())
	if len(r.Repeated) > 0 {
		t.Logf("%s: repeated tokens %v", r.Scenario, r.Repeated)
	}
	faultKeep(r)
	if r.StaleAccepted != 0 {
		t.Errorf("%s: %d stale writes accepted", r.Scenario, r.StaleAccepted)
	}
	for _, a := range r.Anomalies {
		t.Errorf("%s: %s", r.Scenario, a)
	}
	return r
}

// faultFinal reads each key's final record from the store, bounded.
func faultFinal(t *testing.T, s storage.Store, keys []string) map[string]*storage.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	final := map[string]*storage.Record{}
	for _, k := range keys {
		rec, err := s.Get(ctx, k)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			final[k] = nil
		case err != nil:
			t.Fatalf("final read of %q: %v", k, err)
		default:
			final[k] = &rec
		}
	}
	return final
}

// faultCheck is the oracle. It reads ops as a history of one lock and a
// fenced store, and final as each written key's record at the end (nil if
// absent), and returns the figures. Its rules, per key:
//
//   - An accepted write whose token is below that of a write accepted and
//     finished before it started is a stale write accepted. In any store
//     order consistent with real time, accepted tokens must not decrease.
//   - The final record is the highest accepted token's (or an unknown
//     write's at least as high) and holds a value written with that token,
//     by a write no accepted write started after.
//   - A refusal must be explained: some write with a higher token, accepted
//     or unknown, started before the refusal returned.
//
// Unknown writes may or may not have happened, so they can explain a final
// record or a refusal but are never held against the store.
//
// With REDFENCE_FAULT_DUMP set to a directory, faultCheck also writes the
// history there as <scenario>.json, for a closer look.
func faultCheck(scenario string, ops []faultOp, final map[string]*storage.Record) faultReport {
	faultDump(scenario, ops)
	r := faultReport{Scenario: scenario, Ops: len(ops)}
	byKey := map[string][]faultOp{}
	for _, op := range ops {
		if op.Outcome == faultUnknown {
			r.Unknown++
		}
		switch op.Kind {
		case faultLock:
			if op.Outcome == faultOK {
				r.Acquisitions++
			}
		case faultWrite:
			byKey[op.Key] = append(byKey[op.Key], op)
			switch op.Outcome {
			case faultOK:
				r.Accepted++
			case faultStale:
				r.Refused++
			}
			if op.AfterLoss {
				r.AfterLoss++
			}
		}
	}
	r.MutexViolations = faultOverlaps(ops)
	backwards := faultTokens(ops, &r)
	for _, op := range ops {
		if op.Kind == faultWrite && op.Outcome == faultStale && backwards[[2]uint64{uint64(op.Proc), op.Token}] {
			r.FencedOut++
		}
	}

	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range byKey {
			if !yield(k) {
				return
			}
		}
	})
	for i, k := range keys {
		ws := byKey[k]
		var highest uint64
		for _, w := range ws {
			if w.Outcome == faultOK {
				highest = max(highest, w.Token)
			}
		}
		r.Highest = max(r.Highest, highest)
		for _, w := range ws {
			switch w.Outcome {
			case faultOK:
				if faultStaleAccepted(w, ws) {
					r.StaleAccepted++
				}
			case faultStale:
				if !faultRefusalExplained(w, ws) {
					r.Anomalies = append(r.Anomalies, fmt.Sprintf("key %q: write of token %d refused with no higher write before it", k, w.Token))
				}
			}
		}
		rec, ok := final[k]
		if !ok {
			continue
		}
		if i == 0 && rec != nil {
			r.FinalToken = uint64(rec.Token)
		}
		if a := faultFinalAnomaly(k, rec, ws, highest); a != "" {
			r.Anomalies = append(r.Anomalies, a)
		}
	}
	return r
}

// faultStaleAccepted reports whether accepted write w came after (in real
// time) an accepted write with a higher token.
func faultStaleAccepted(w faultOp, ws []faultOp) bool {
	for _, x := range ws {
		if x.Outcome == faultOK && x.End < w.Start && x.Token > w.Token {
			return true
		}
	}
	return false
}

// faultRefusalExplained reports whether a write with a higher token,
// accepted or unknown, started before refused write w returned.
func faultRefusalExplained(w faultOp, ws []faultOp) bool {
	for _, x := range ws {
		if (x.Outcome == faultOK || x.Outcome == faultUnknown) && x.Token > w.Token && x.Start < w.End {
			return true
		}
	}
	return false
}

// faultFinalAnomaly checks key's final record against its writes.
func faultFinalAnomaly(key string, rec *storage.Record, ws []faultOp, highest uint64) string {
	if rec == nil {
		if highest > 0 {
			return fmt.Sprintf("key %q: no final record, but token %d was accepted", key, highest)
		}
		return ""
	}
	tok := uint64(rec.Token)
	var src *faultOp
	for i, w := range ws {
		if (w.Outcome == faultOK || w.Outcome == faultUnknown) && w.Token == tok && w.Value == string(rec.Value) {
			src = &ws[i]
		}
	}
	switch {
	case tok < highest:
		return fmt.Sprintf("key %q: final token %d is below the highest accepted %d", key, tok, highest)
	case src == nil:
		return fmt.Sprintf("key %q: final record (%q, token %d) matches no write", key, rec.Value, tok)
	}
	for _, x := range ws {
		if x.Outcome == faultOK && x.Start > src.End {
			return fmt.Sprintf("key %q: final record (%q, token %d) was overwritten by an accepted write (%q, token %d) that started after it ended", key, rec.Value, tok, x.Value, x.Token)
		}
	}
	return ""
}

// faultOverlaps counts pairs of acquisitions by different procs whose
// holders believed they held the lock at overlapping times. A holder
// believes from the moment Lock returns until it calls Unlock or its lease
// reports itself lost, whichever is first; a holder that never unlocked
// (killed, stopped by the test) believes until its last operation.
func faultOverlaps(ops []faultOp) int {
	type belief struct {
		proc       int
		from, till int64
	}
	var bs []belief
	open := map[int]int{} // proc -> index in bs of its open belief
	last := map[int]int64{}
	for _, op := range slices.SortedFunc(slices.Values(ops), func(a, b faultOp) int { return cmp.Compare(a.End, b.End) }) {
		last[op.Proc] = max(last[op.Proc], op.End)
		switch {
		case op.Kind == faultLock && op.Outcome == faultOK:
			open[op.Proc] = len(bs)
			bs = append(bs, belief{proc: op.Proc, from: op.End, till: -1})
		case op.Kind == faultUnlock:
			if i, ok := open[op.Proc]; ok {
				till := op.Start
				if op.LostAt > 0 && op.LostAt < till {
					till = op.LostAt
				}
				bs[i].till = till
				delete(open, op.Proc)
			}
		}
	}
	for _, i := range open {
		bs[i].till = last[bs[i].proc]
	}
	n := 0
	for i := range bs {
		for j := i + 1; j < len(bs); j++ {
			a, b := bs[i], bs[j]
			if a.proc != b.proc && a.from < b.till && b.from < a.till {
				n++
			}
		}
	}
	return n
}

// faultTokens counts repeated tokens into r and returns the acquisitions,
// as {proc, token}, whose token went backwards: repeated, or issued after a
// higher one had been.
func faultTokens(ops []faultOp, r *faultReport) map[[2]uint64]bool {
	locks := slices.DeleteFunc(slices.Clone(ops), func(op faultOp) bool {
		return op.Kind != faultLock || op.Outcome != faultOK
	})
	slices.SortFunc(locks, func(a, b faultOp) int { return cmp.Compare(a.End, b.End) })
	seen := map[uint64]bool{}
	backwards := map[[2]uint64]bool{}
	var top uint64
	for _, l := range locks {
		if seen[l.Token] {
			r.TokensRepeated++
			if !slices.Contains(r.Repeated, l.Token) {
				r.Repeated = append(r.Repeated, l.Token)
			}
		}
		if seen[l.Token] || l.Token < top {
			backwards[[2]uint64{uint64(l.Proc), l.Token}] = true
		}
		seen[l.Token] = true
		top = max(top, l.Token)
	}
	slices.Sort(r.Repeated)
	return backwards
}

// faultDump writes ops to $REDFENCE_FAULT_DUMP/<scenario>.json, if set.
// It is a debugging aid: failing to write is not the test's failure.
func faultDump(scenario string, ops []faultOp) {
	dir := os.Getenv("REDFENCE_FAULT_DUMP")
	if dir == "" {
		return
	}
	b, err := json.MarshalIndent(ops, "", " ")
	if err != nil {
		return
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(scenario) + ".json"
	_ = os.WriteFile(filepath.Join(dir, name), b, 0o644)
}
