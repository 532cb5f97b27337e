package testenv_test

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/testenv"
)

// WaitStopped sees a stopped child as stopped, and refuses a running one
// once its time is up.
func TestWaitStopped(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	require.Error(t, testenv.WaitStopped(pid, 20*time.Millisecond), "a running process is not stopped")
	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	require.NoError(t, testenv.WaitStopped(pid, time.Minute))
}
