package mutant_test

import (
	"os"
	"testing"

	"github.com/redfence/redfence/internal/testkit/testenv"
)

// A test that skips for want of a real server is counted, and the package
// ends by saying how many skipped and which variables run them (testenv.Run).
func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }
