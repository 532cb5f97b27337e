package reentrant_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test of the package must leave no goroutine behind: Close is
// synchronous, and a client's renewer, waiters and undos end with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
