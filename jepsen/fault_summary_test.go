//go:build unix

package jepsen_test

import "testing"

// TestFaultSummary prints every fault scenario's figures as one table. Go
// runs a package's tests in file-name order, so with -run Fault this comes
// after the scenarios (files fault_[a-r]*); alone it has nothing to print.
func TestFaultSummary(t *testing.T) {
	faultReports.mu.Lock()
	rs := faultReports.rs
	faultReports.mu.Unlock()
	if len(rs) == 0 {
		t.Skip("no fault scenario ran before this test")
	}
	t.Logf("fault scenarios (noack: acquisitions undone with ErrNotReplicated because no replica acknowledged them; mutex: pairs of holders that believed they held the lock at once; STALE: stale writes accepted, must be 0 but for the broken store; repeat: acquisitions given an already issued token; fenced: writes refused under such tokens):\n%s", faultTable(rs))
}
