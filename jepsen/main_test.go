package jepsen_test

import (
	"os"
	"testing"

	"github.com/redfence/redfence/internal/testkit/testenv"
)

// afterTests, when set (fault_summary_test.go), runs once every test has.
var afterTests func()

// A test that skips for want of a real server is counted, and the package
// ends by saying how many skipped and which variables run them (testenv.Run).
// The fault scenarios' summary table follows.
//
// The subtests of the longest scenarios call t.Parallel: they run two at a
// time (go test's -parallel, GOMAXPROCS by default), each on servers and
// processes of its own, and they mostly wait (for faults to last, for a
// failover, for holders to get through). Their checks wait for what they
// check to happen, so a loaded machine makes them slower, not wrong.
func TestMain(m *testing.M) {
	code := testenv.Run(m)
	if afterTests != nil {
		afterTests()
	}
	os.Exit(code)
}
