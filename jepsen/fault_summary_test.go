//go:build unix

package jepsen_test

import "fmt"

func init() { afterTests = printFaultSummary }

// printFaultSummary prints every fault scenario's figures as one table to
// the test binary's output (shown with -v, or when the package fails). It
// checks nothing itself: each scenario's safety and progress checks run in
// its own test (faultRecord and the scenario's assertions).
func printFaultSummary() {
	faultReports.mu.Lock()
	rs := faultReports.rs
	faultReports.mu.Unlock()
	if len(rs) == 0 {
		return
	}
	fmt.Printf("fault scenarios (noack: acquisitions undone with ErrNotReplicated because no replica acknowledged them; mutex: pairs of holders that believed they held the lock at once; STALE: stale writes accepted, must be 0 but for the broken store; repeat: acquisitions given an already issued token; fenced: writes refused under such tokens):\n%s", faultTable(rs))
}
