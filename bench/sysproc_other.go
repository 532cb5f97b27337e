//go:build !linux

package main

import (
	"os/exec"
	"syscall"
	"time"
)

// sysProcAttr has no parent-death signal outside Linux: a run killed before
// it stops its server leaves that server running.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// ownGroup has no process groups to use outside Linux here: cancellation
// kills the script alone, and Wait returns waitDelay later even if its
// children still hold its output.
func ownGroup(cmd *exec.Cmd, waitDelay time.Duration) { cmd.WaitDelay = waitDelay }
