package testenv

import (
	"bytes"
	"fmt"
	"os"
	"time"
)

// WaitStopped waits, at most d, until process pid is stopped (state T in
// /proc/PID/stat), so that what a test does next happens while the process
// is frozen for sure: SIGSTOP is delivered asynchronously. Where there is
// no /proc (not Linux) it gives the signal 200 ms to land and returns nil.
func WaitStopped(pid int, d time.Duration) error {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		time.Sleep(min(d, 200*time.Millisecond))
		return nil
	}
	deadline := time.Now().Add(d)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// "pid (comm) S ...": comm may hold spaces and parentheses, so
		// the state is read after the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return fmt.Errorf("pid %d: malformed stat %q", pid, b)
		}
		if b[i+2] == 'T' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d not stopped within %v (state %c)", pid, d, b[i+2])
		}
		time.Sleep(time.Millisecond)
	}
}
