package reentrant_test

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
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
	reentrant.SetSeenErr(seen.add)
	goleak.VerifyTestMain(phraseCheck{testenv.Wrap(m)})
}

// seen is every error message the package's methods returned while the
// tests ran; phraseCheck fails the run when one says a phrase of four words
// twice ("no renewal confirmed ...: ... no renewal confirmed ..."): an
// error chain should say each thing once.
var seen = &messages{m: map[string]bool{}}

type messages struct {
	mu sync.Mutex
	m  map[string]bool
}

func (s *messages) add(err error) {
	s.mu.Lock()
	s.m[err.Error()] = true
	s.mu.Unlock()
}

type phraseCheck struct{ m interface{ Run() int } }

func (p phraseCheck) Run() int {
	code := p.m.Run()
	seen.mu.Lock()
	defer seen.mu.Unlock()
	var bad []string
	for msg := range seen.m {
		if ph := repeatedPhrase(msg, 4); ph != "" {
			bad = append(bad, fmt.Sprintf("%q says %q twice", msg, ph))
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		fmt.Fprintln(os.Stderr, "error message:", b)
	}
	if len(bad) > 0 && code == 0 {
		code = 1
	}
	if os.Getenv("REDFENCE_PRINT_ERRORS") != "" {
		fmt.Fprintf(os.Stderr, "%d distinct error messages checked\n", len(seen.m))
	}
	return code
}
