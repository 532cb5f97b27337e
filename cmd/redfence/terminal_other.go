//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd || windows)

package main

import "os"

// isTerminal reports false where this command cannot tell a terminal:
// unlock then needs --yes, which is the safe side.
func isTerminal(*os.File) bool { return false }
