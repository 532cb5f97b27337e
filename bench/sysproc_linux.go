package main

import (
	"os/exec"
	"syscall"
	"time"
)

// sysProcAttr makes the kernel kill redis-server if this process dies
// without stopping it (a SIGKILL, a crash), so no server outlives a run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// ownGroup runs cmd (a script) in a process group of its own, and makes its
// cancellation signal the whole group: the script's children (redis-server,
// go build, a benchmark binary) end with it instead of outliving it and
// holding its output open. SIGTERM lets the script's own trap stop its
// server; after waitDelay Wait returns regardless.
func ownGroup(cmd *exec.Cmd, waitDelay time.Duration) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = waitDelay
}
