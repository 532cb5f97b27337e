//go:build linux

package redisproc

import "syscall"

// sysProcAttr has the kernel SIGKILL redis-server when the test binary dies
// without running its cleanups (a -timeout panic, a SIGKILL). The signal is
// tied to the thread that started the child; Go keeps its threads alive
// unless a goroutine exits while locked to one, which this package never does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
