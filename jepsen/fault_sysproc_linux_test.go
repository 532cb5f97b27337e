//go:build linux

package jepsen_test

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"time"
)

// faultSysProcAttr makes the kernel kill a holder process if the test
// binary dies without running its cleanups, as on a -timeout.
func faultSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// faultWaitStopped waits, at most d, until every thread of pid is stopped
// (state T in /proc), so that what the test does next happens while the
// process is frozen for sure: SIGSTOP is delivered asynchronously.
func faultWaitStopped(pid int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		state, err := faultProcState(pid)
		if err != nil {
			return err
		}
		if state == 'T' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d not stopped within %v (state %c)", pid, d, state)
		}
		time.Sleep(time.Millisecond)
	}
}

func faultProcState(pid int) (byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) S ...: comm may hold spaces and parentheses, so look
	// after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("pid %d: malformed stat %q", pid, b)
	}
	return b[i+2], nil
}
