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
func TestMain(m *testing.M) {
	code := testenv.Run(m)
	if afterTests != nil {
		afterTests()
	}
	os.Exit(code)
}
