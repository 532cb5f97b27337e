package history

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// HistoryDirVar names the variable holding the directory where failing
// histories are written; without it they go to os.TempDir(). A test's own
// t.TempDir() would not do: it is deleted when the test ends.
const HistoryDirVar = "REDFENCE_HISTORY_DIR"

// Result is the verdict of one check.
type Result struct {
	Verdict porcupine.CheckResult // Ok, Illegal, or Unknown when it timed out
	Ops     int                   // operations checked
	Elapsed time.Duration         // time the checker took

	model porcupine.Model
	info  porcupine.LinearizationInfo
}

// String formats the result for a test log.
func (r Result) String() string {
	return fmt.Sprintf("%s: %d ops checked in %v", r.Verdict, r.Ops, r.Elapsed.Round(time.Millisecond))
}

// Check runs porcupine on ops against m, giving up after timeout (zero:
// no limit). The checker is NP-hard in the number of concurrent
// operations; keep histories and concurrency modest.
func Check(m porcupine.Model, ops []porcupine.Operation, timeout time.Duration) Result {
	start := time.Now()
	v, info := porcupine.CheckOperationsVerbose(m, ops, timeout)
	return Result{Verdict: v, Ops: len(ops), Elapsed: time.Since(start), model: m, info: info}
}

// WriteHTML writes porcupine's visualization of the checked history to
// path: each partition's longest linearizable prefix and where it got
// stuck.
func (r Result) WriteHTML(path string) error {
	return porcupine.VisualizePath(r.model, r.info, path)
}

// Linearizable checks ops against m and fails t unless the history is
// linearizable. On a violation or a timeout it writes the visualization to
// $REDFENCE_HISTORY_DIR (or os.TempDir()) as redfence-<test>-<time>.html
// and names the file in the failure.
func Linearizable(t testing.TB, m porcupine.Model, ops []porcupine.Operation, timeout time.Duration) Result {
	t.Helper()
	return expect(t, m, ops, timeout, porcupine.Ok)
}

// NotLinearizable checks ops against m and fails t unless the checker finds
// a violation. It proves a checker can fail: run it on a deliberately
// broken system. When the checker passes the history after all, the
// visualization is written as by [Linearizable] and named.
func NotLinearizable(t testing.TB, m porcupine.Model, ops []porcupine.Operation, timeout time.Duration) Result {
	t.Helper()
	return expect(t, m, ops, timeout, porcupine.Illegal)
}

// expect checks ops against m and fails t unless the verdict is want,
// naming the visualization it writes then.
func expect(t testing.TB, m porcupine.Model, ops []porcupine.Operation, timeout time.Duration, want porcupine.CheckResult) Result {
	t.Helper()
	r := Check(m, ops, timeout)
	if r.Verdict == want {
		return r
	}
	path, err := r.save(t.Name())
	if err != nil {
		path = "(not written: " + err.Error() + ")"
	}
	switch {
	case want == porcupine.Illegal:
		t.Errorf("the checker did not catch the broken variant: %v; history in %s", r, path)
	case r.Verdict == porcupine.Unknown:
		t.Errorf("linearizability check timed out after %v (%v): shrink the history or raise the timeout; history in %s", timeout, r, path)
	default:
		t.Errorf("history is not linearizable (%v); visualization in %s", r, path)
	}
	return r
}

func (r Result) save(test string) (string, error) {
	dir := os.Getenv(HistoryDirVar)
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	name := strings.Map(func(c rune) rune {
		if c == '/' || c == ' ' || c == os.PathSeparator {
			return '_'
		}
		return c
	}, test)
	path := filepath.Join(dir, fmt.Sprintf("redfence-%s-%s.html", name, time.Now().Format("20060102T150405.000000000")))
	return path, r.WriteHTML(path)
}
