//go:build unix && !linux

package jepsen_test

import (
	"syscall"
)

// faultSysProcAttr: only Linux can tie a child's life to its parent's.
func faultSysProcAttr() *syscall.SysProcAttr { return nil }
