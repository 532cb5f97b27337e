//go:build !linux

package s3store_test

import "syscall"

// sysProcAttr is empty off Linux: a gateway outlives a test binary that
// dies without running TestMain's stop.
func sysProcAttr() *syscall.SysProcAttr { return nil }
