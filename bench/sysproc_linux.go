package main

import "syscall"

// sysProcAttr makes the kernel kill redis-server if this process dies
// without stopping it (a SIGKILL, a crash), so no server outlives a run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
