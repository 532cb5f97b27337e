//go:build unix && !linux

package jepsen_test

import (
	"syscall"
	"time"
)

// faultSysProcAttr: only Linux can tie a child's life to its parent's.
func faultSysProcAttr() *syscall.SysProcAttr { return nil }

// faultWaitStopped cannot read a process's state portably; it gives the
// signal a moment to land.
func faultWaitStopped(pid int, d time.Duration) error {
	time.Sleep(min(d, 50*time.Millisecond))
	return nil
}
