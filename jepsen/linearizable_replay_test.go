//go:build !race

// The replayed-release mutant under the shared-owner workload. Built without
// the race detector only: it checks that the history checker catches a
// planted bug, not the code for data races, and under -race each run is
// five times slower while the bug shows in fewer runs, so the test took
// minutes. .ci/run runs it in a build of its own.

package jepsen_test

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/redfence/redfence/internal/testkit/mutant"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/jepsen/internal/history"
)

// TestLinearizableCatchesReplayedReleaseTakingALevel reintroduces the bug of
// the count-based script: a retried release whose level is gone takes
// another level. The checker must call the history illegal.
func TestLinearizableCatchesReplayedReleaseTakingALevel(t *testing.T) {
	mutant.ReplayedReleaseTakesALevel(t)
	// The bug shows only when a retry lands after its level was released
	// and the extra level taken is then observed; a run may miss it, so up
	// to twenty runs, within four minutes, get the chance, and the last one
	// must be called illegal. A history with many unknown outcomes can take
	// porcupine long to settle: a check cut short by its timeout counts as
	// a miss, not a verdict.
	start := time.Now()
	for i := 0; ; i++ {
		m, c := testenv.Mini(t)
		_, n := linScale()
		run, _ := linSharedOwnerRun(t, testenv.Backend{Name: "miniredis", Client: c, Mini: m}, n)
		ops := run.locks.Operations()
		last := i == 19 || time.Since(start) > 4*time.Minute
		if r := history.Check(history.LockModel(), ops, 10*time.Second); r.Verdict == porcupine.Illegal || last {
			r = history.NotLinearizable(t, history.LockModel(), ops, linCheckTimeout)
			t.Logf("run %d: %v; check %v", i+1, run.locks.Counts(), r)
			return
		}
	}
}
