//go:build unix && !linux

package redisproc

import "syscall"

// sysProcAttr is empty off Linux: there is no parent-death signal, so a test
// binary killed before its cleanups run leaves its servers running.
func sysProcAttr() *syscall.SysProcAttr { return nil }
