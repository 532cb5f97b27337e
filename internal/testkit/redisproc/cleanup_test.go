//go:build unix

package redisproc_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/redisproc"
)

// Every process a test started, paused, killed or restarted is gone once
// the test's cleanups have run.
func TestNoLeftoverProcesses(t *testing.T) {
	var servers []*redisproc.Server
	t.Run("scenario", func(t *testing.T) {
		primary := redisproc.Start(t, redisproc.WithAOF("always"))
		replica := redisproc.Start(t, redisproc.WithReplicaOf(primary))
		paused := redisproc.Start(t)
		servers = append(servers, primary, replica, paused)
		replica.WaitSync(t.Context())
		primary.Kill()
		primary.Restart()
		replica.WaitSync(t.Context())
		replica.Isolate() // left frozen: cleanup must still kill it
		paused.Pause()
	})
	var pids []int
	for _, s := range servers {
		pids = append(pids, s.PIDs()...)
	}
	require.Len(t, pids, 4)
	for _, pid := range pids {
		assert.False(t, alive(pid), "redis-server pid %d left running", pid)
	}
}

// helperVar makes TestHelperProcess start a server and then end the way
// its value says, in a child test binary.
const helperVar = "REDISPROC_TEST_HELPER"

func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperVar)
	if mode == "" {
		return // not a child: nothing to do, and nothing to skip
	}
	s := redisproc.Start(t)
	fmt.Printf("pid=%d\n", s.PID())
	switch mode {
	case "fail":
		t.Fatal("helper fails on purpose")
	case "panic":
		panic("helper panics on purpose")
	case "sigkill":
		// The test binary dies without running any cleanup, as on a
		// -timeout; only the parent-death signal can stop the server.
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
	}
}

func TestNoLeftoverWhenTestBinaryDies(t *testing.T) {
	modes := []string{"fail", "panic"}
	if runtime.GOOS == "linux" {
		modes = append(modes, "sigkill")
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), helperVar+"="+mode)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "the helper must fail:\n%s", out)
			m := regexp.MustCompile(`pid=(\d+)`).FindSubmatch(out)
			require.NotNil(t, m, "helper printed no pid:\n%s", out)
			pid, _ := strconv.Atoi(string(m[1]))
			// After a SIGKILL the kernel kills the orphan asynchronously.
			require.Eventually(t, func() bool { return !alive(pid) }, time.Minute, 10*time.Millisecond,
				"redis-server pid %d outlived a helper that ended by %s:\n%s", pid, mode, out)
		})
	}
}

// Without redis-server, Start skips, or fails under CI=true.
func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(redisproc.BinaryVar, "")
	for ci, want := range map[string]string{"": "skip", "true": "fatal"} {
		t.Setenv("CI", ci)
		tb := &recordTB{TB: t}
		tb.run(func() { redisproc.Start(tb) })
		assert.Equal(t, want, tb.ended, "CI=%q", ci)
		assert.Contains(t, tb.msg, redisproc.BinaryVar)
	}
}

// recordTB records how a helper ended the test instead of ending it.
type recordTB struct {
	testing.TB
	ended, msg string
}

func (r *recordTB) Helper() {}
func (r *recordTB) Fatalf(format string, args ...any) {
	r.ended, r.msg = "fatal", fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recordTB) Skipf(format string, args ...any) {
	r.ended, r.msg = "skip", fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f on its own goroutine, so Goexit ends only f.
func (r *recordTB) run(f func()) {
	var wg sync.WaitGroup
	wg.Go(f)
	wg.Wait()
}

// alive reports whether pid is a running redis-server: a zombie, or a PID
// the kernel has reused for another program, counts as gone.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if os.IsNotExist(err) {
		return false
	}
	if err != nil { // no /proc: ask the kernel
		return syscall.Kill(pid, 0) == nil
	}
	s := string(stat)
	open, shut := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || shut < open || len(s) < shut+3 {
		return true
	}
	return s[open+1:shut] == "redis-server" && s[shut+2] != 'Z'
}

func splitLines(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }
