package reentrant_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/redfence/redfence/internal/testkit/testenv"
)

// Every test of the package must leave no goroutine behind: Close is
// synchronous, and a client's renewer, waiters and undos end with it.
//
// A test that skips for want of a real server is counted, and the package
// ends by saying how many skipped and which variables run them (testenv.Wrap).
//
// A test binary re-executed as a helper process (TestDeadWaiterDelaysNextByAtMostTheBound)
// runs the helper instead of the tests.
func TestMain(m *testing.M) {
	if spec := os.Getenv(helperWaiterVar); spec != "" {
		helperWaiter(spec)
	}
	goleak.VerifyTestMain(testenv.Wrap(m))
}
