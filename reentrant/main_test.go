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
//
// The package's longest tests call t.Parallel: they run two at a time
// (go test's -parallel, GOMAXPROCS by default) once the others are done,
// which halves their share of the package's time, since each waits on
// servers, processes and timers of its own far more than it computes. Such
// a test counts no goroutines, changes no package-level value and reads no
// statistics of a shared server, and its timing checks keep their room on
// a loaded machine; a test that cannot promise all of that stays
// sequential.
func TestMain(m *testing.M) {
	if spec := os.Getenv(helperWaiterVar); spec != "" {
		helperWaiter(spec)
	}
	goleak.VerifyTestMain(testenv.Wrap(m))
}
