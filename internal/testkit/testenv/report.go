package testenv

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// skips counts this test binary's skips for want of a variable.
var skips tally

// tally counts skipped tests per variable that would have run them.
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

// missing fails t under CI and otherwise skips it, counting the skip
// against name once it has taken effect: a fake TB whose Skipf does not
// end a real test is not counted.
func (c *tally) missing(t testing.TB, name, fail, skip string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s", fail)
		return
	}
	defer func() {
		if t.Skipped() {
			c.add(name)
		}
	}()
	t.Skipf("%s", skip)
}

func (c *tally) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[string]int)
	}
	c.n[name]++
}

// counts returns a copy of the counts.
func (c *tally) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// summary returns the line that reports the skips counts holds (variable
// to number of tests) for the package pkg, or "" if nothing skipped:
//
//	pkg: 14 tests skipped: set REDFENCE_REDIS_ADDR (12) and REDFENCE_POSTGRES_URL (2) to run them
//
// Variables come most skips first, then by name; a lone variable goes
// without its count.
func summary(pkg string, counts map[string]int) string {
	type skipped struct {
		name string
		n    int
	}
	var vars []skipped
	total := 0
	for name, n := range counts {
		if n > 0 {
			vars = append(vars, skipped{name, n})
			total += n
		}
	}
	if total == 0 {
		return ""
	}
	slices.SortFunc(vars, func(a, b skipped) int {
		return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.name, b.name))
	})
	var b strings.Builder
	if pkg != "" {
		b.WriteString(pkg + ": ")
	}
	tests, them := "tests", "them"
	if total == 1 {
		tests, them = "test", "it"
	}
	fmt.Fprintf(&b, "%d %s skipped: set ", total, tests)
	for i, v := range vars {
		switch {
		case i == 0:
		case i == len(vars)-1:
			b.WriteString(" and ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(v.name)
		if len(vars) > 1 {
			fmt.Fprintf(&b, " (%d)", v.n)
		}
	}
	fmt.Fprintf(&b, " to run %s", them)
	return b.String()
}

// Run runs m's tests and returns their exit code, for a TestMain that
// ends with os.Exit(testenv.Run(m)).
//
// If tests skipped for want of a variable (see [Missing]), Run then writes
// one line that names the package, says how many tests skipped and which
// variables enable them. It goes to standard output, which go test shows
// with -v or -json and when the package fails. A bare `go test ./...`
// shows nothing of a passing package's output but its "ok" line, so when
// the package passed, go test was not given -v (or -json), and standard
// output is not a terminal already (as it is for `go test` in a package's
// directory), the line also goes to the controlling terminal, /dev/tty, if
// there is one: a developer sees it, CI and IDEs without one do not.
//
// A result go test takes from its cache reruns nothing and says nothing
// more than "(cached)"; -count=1 runs the tests again.
func Run(m interface{ Run() int }) int {
	code := m.Run()
	line := summary(pkgPath(), skips.counts())
	if line == "" {
		return code
	}
	fmt.Fprintln(os.Stdout, line)
	if toTerminal(code, testing.Verbose(), direct(os.Stdout)) {
		if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
			_, _ = fmt.Fprintln(tty, line)
			_ = tty.Close()
		}
	}
	return code
}

// Wrap returns m with a Run that reports as [Run] does, for a TestMain that
// hands m to another runner: goleak.VerifyTestMain(testenv.Wrap(m)).
//
// Before it returns, Run waits (at most 3 s) for go-redis's redialers to
// end: a pool whose dials failed as many times as it has connections
// starts one, which polls once a second and returns at the first poll
// after the pool's Close, later than goleak looks.
func Wrap(m interface{ Run() int }) interface{ Run() int } {
	return runFunc(func() int {
		code := Run(m)
		for deadline := time.Now().Add(3 * time.Second); redialing() && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
		return code
	})
}

// redialing reports whether a go-redis pool's redialer (tryDial) runs.
func redialing() bool {
	buf := make([]byte, 1<<20)
	return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("internal/pool.(*ConnPool).tryDial"))
}

type runFunc func() int

func (f runFunc) Run() int { return f() }

// toTerminal reports whether the line must also go to the terminal: go
// test shows standard output if the package failed (code != 0), under -v
// or -json (verbose), or if it is a terminal or the like itself (direct).
func toTerminal(code int, verbose, direct bool) bool {
	return code == 0 && !verbose && !direct
}

// direct reports whether f is a character device (a terminal, or
// /dev/null), not the pipe or file through which go test collects a
// package's output.
func direct(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// pkgPath returns the import path of the package under test: the test
// binary's main package is its path with ".test" appended.
func pkgPath() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	return strings.TrimSuffix(bi.Path, ".test")
}
