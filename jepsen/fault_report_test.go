//go:build unix

package jepsen_test

import (
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

	"github.com/redfence/redfence/storage"
)

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
	// NotReplicated counts acquisitions undone because too few replicas
	// acknowledged them (reentrant.WithReplicaAck): the price of not
	// handing out a token a failover could issue again.
	NotReplicated int
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
	return fmt.Sprintf("%s: ops=%d acquisitions=%d not_replicated=%d accepted=%d refused=%d mutex_violations=%d stale_accepted=%d unknown=%d tokens_repeated=%d fenced_out=%d writes_after_loss=%d highest=%d",
		r.Scenario, r.Ops, r.Acquisitions, r.NotReplicated, r.Accepted, r.Refused, r.MutexViolations, r.StaleAccepted, r.Unknown, r.TokensRepeated, r.FencedOut, r.AfterLoss, r.Highest)
}

// faultTable formats reports as an aligned table.
func faultTable(rs []faultReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-34s %6s %5s %6s %6s %6s %6s %6s %6s %6s %6s\n",
		"scenario", "ops", "acq", "noack", "accept", "refuse", "mutex", "STALE", "unknwn", "repeat", "fenced")
	for _, r := range rs {
		fmt.Fprintf(&b, "%-34s %6d %5d %6d %6d %6d %6d %6d %6d %6d %6d\n",
			r.Scenario, r.Ops, r.Acquisitions, r.NotReplicated, r.Accepted, r.Refused, r.MutexViolations, r.StaleAccepted, r.Unknown, r.TokensRepeated, r.FencedOut)
	}
	return b.String()
}

// faultReports collects every report of the run for the summary table
// (fault_summary_test.go).
var faultReports struct {
	mu sync.Mutex
	rs []faultReport
}

// faultKeep keeps r for the summary table.
func faultKeep(r faultReport) {
	faultReports.mu.Lock()
	defer faultReports.mu.Unlock()
	faultReports.rs = append(faultReports.rs, r)
}

// faultRecord logs r, keeps it for the summary and fails t if the oracle
// found a stale write accepted or another anomaly, or nothing was acquired.
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
	if r.Acquisitions == 0 {
		t.Errorf("%s: no acquisition at all: the scenario checked nothing", r.Scenario)
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

// faultMerge sums the reports of independent locks (or runs) into one
// for scenario; a report of that scenario already is a sum, whose
// anomalies are named already.
func faultMerge(scenario string, rs []faultReport) faultReport {
	m := faultReport{Scenario: scenario}
	for _, r := range rs {
		m.Ops += r.Ops
		m.Acquisitions += r.Acquisitions
		m.Accepted += r.Accepted
		m.Refused += r.Refused
		m.MutexViolations += r.MutexViolations
		m.StaleAccepted += r.StaleAccepted
		m.Unknown += r.Unknown
		m.NotReplicated += r.NotReplicated
		m.TokensRepeated += r.TokensRepeated
		m.FencedOut += r.FencedOut
		m.AfterLoss += r.AfterLoss
		m.Repeated = append(m.Repeated, r.Repeated...)
		for _, a := range r.Anomalies {
			if r.Scenario != scenario { // not a sum made earlier
				a = r.Scenario + ": " + a
			}
			m.Anomalies = append(m.Anomalies, a)
		}
		m.Highest = max(m.Highest, r.Highest)
	}
	slices.Sort(m.Repeated)
	m.Repeated = slices.Compact(m.Repeated) // the same token may repeat on several names
	return m
}
