//go:build linux

package jepsen_test

import (
	"syscall"
)

// faultSysProcAttr makes the kernel kill a holder process if the test
// binary dies without running its cleanups, as on a -timeout.
func faultSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
