package redfence_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/redfence/redfence/internal/mutant"
	"github.com/redfence/redfence/internal/testenv"
)

// TestLockPropertiesCatchBrokenRelease swaps in a release script that skips
// the owner and token check and asserts the state machine notices: the
// property test is able to fail.
func TestLockPropertiesCatchBrokenRelease(t *testing.T) {
	catchesMutant(t, "MutantReleaseWithoutOwnerCheck", mutant.ReleaseWithoutOwnerCheck,
		"the state machine accepted a release that skips the owner check")
}

// TestLockPropertiesCatchUnfairHandoff plants a release that hands the lock
// to the newest waiter instead of the oldest: the machine must notice.
func TestLockPropertiesCatchUnfairHandoff(t *testing.T) {
	catchesMutant(t, "MutantHandoffToNewestWaiter", mutant.HandoffToNewestWaiter,
		"the state machine accepted a handoff to the newest waiter")
}

// TestLockPropertiesCatchReplayedRelease reintroduces the bug the level
// layout fixed: a release whose level is already gone (a retry) takes
// another level instead, as the count-based script did when the owner had
// reentered between the two attempts. The replay action must notice.
func TestLockPropertiesCatchReplayedRelease(t *testing.T) {
	catchesMutant(t, "MutantReplayedReleaseTakesALevel", mutant.ReplayedReleaseTakesALevel,
		"the state machine accepted a replayed release that took another level")
}

// catchesMutant plants a broken script on miniredis and fails t unless the
// lock machine reports a failure.
func catchesMutant(t *testing.T, name string, plant func(testing.TB), msg string) {
	m, rdb := testenv.Mini(t)
	b := testenv.Backend{Name: "miniredis", Client: rdb, Mini: m}
	plant(t)
	rec := mustFail(t, name)
	rapid.Check(rec, lockMachineBody(b, propClient(t, b)))
	require.True(t, rec.failed, msg)
}

// failRecorder stands in for *testing.T where a check is expected to fail:
// it records the failure instead of failing the test.
type failRecorder struct {
	testing.TB
	name   string
	failed bool
}

func mustFail(t *testing.T, name string) *failRecorder {
	// rapid saves a failing case under testdata/rapid/NAME; a mutant's case
	// is not one to keep.
	t.Cleanup(func() {
		_ = os.RemoveAll(filepath.Join("testdata", "rapid", name))
		_ = os.Remove(filepath.Join("testdata", "rapid")) // only if empty
		_ = os.Remove("testdata")
	})
	// Shrinking a mutant's failure to a minimal case is not the point here;
	// the failure itself is.
	old := flag.Lookup("rapid.shrinktime").Value.String()
	require.NoError(t, flag.Set("rapid.shrinktime", "1s"))
	t.Cleanup(func() { _ = flag.Set("rapid.shrinktime", old) })
	return &failRecorder{TB: t, name: name}
}

func (r *failRecorder) Name() string          { return r.name }
func (r *failRecorder) Logf(string, ...any)   {}
func (r *failRecorder) Log(...any)            {}
func (r *failRecorder) Errorf(string, ...any) { r.failed = true }
func (r *failRecorder) Error(...any)          { r.failed = true }
func (r *failRecorder) Fatalf(string, ...any) { r.failed = true }
func (r *failRecorder) Fatal(...any)          { r.failed = true }
func (r *failRecorder) Fail()                 { r.failed = true }
func (r *failRecorder) FailNow()              { r.failed = true }
func (r *failRecorder) Failed() bool          { return r.failed }
