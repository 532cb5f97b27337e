package reentrant_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Every test of the package must leave no goroutine behind: Close is
// synchronous, and a client's renewer, waiters and undos end with it.
//
// A test binary re-executed as a helper process (TestDeadWaiterDelaysNextByAtMostTheBound)
// runs the helper instead of the tests.
func TestMain(m *testing.M) {
	if spec := os.Getenv(helperWaiterVar); spec != "" {
		helperWaiter(spec)
	}
	goleak.VerifyTestMain(m)
}
