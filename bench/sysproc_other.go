//go:build !linux

package main

import "syscall"

// sysProcAttr has no parent-death signal outside Linux: a run killed before
// it stops its server leaves that server running.
func sysProcAttr() *syscall.SysProcAttr { return nil }
