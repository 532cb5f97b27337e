package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// isTerminal is false for /dev/null (a character device, as cron and ssh
// -n give stdin) and a pipe, true for a pseudo-terminal.
func TestIsTerminal(t *testing.T) {
	null, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer null.Close()
	fi, err := null.Stat()
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&os.ModeCharDevice, "the case the check is about: a character device")
	require.False(t, isTerminal(null), os.DevNull)

	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	require.False(t, isTerminal(r), "a pipe")

	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal to check the positive case: %v", err)
	}
	defer ptm.Close()
	require.NoError(t, unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	pts, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	defer pts.Close()
	require.True(t, isTerminal(pts), "a pseudo-terminal")
}
