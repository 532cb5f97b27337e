//go:build linux

package s3store_test

import "syscall"

// sysProcAttr has the kernel SIGKILL the gateway when the test binary dies
// without running TestMain's stop (a -timeout panic, a SIGKILL), as
// internal/testkit/redisproc does for redis-server.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
