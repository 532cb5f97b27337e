package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/internal/tuning"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage/memory"
)

// asTerminal makes unlock see a terminal whose operator types answer.
func asTerminal(t *testing.T, answer string) {
	t.Helper()
	oldIn, oldTerm := stdin, stdinIsTerminal
	stdin, stdinIsTerminal = strings.NewReader(answer), func() bool { return true }
	t.Cleanup(func() { stdin, stdinIsTerminal = oldIn, oldTerm })
}

// unlock --force ends the holder's ownership and hands the lock to the
// waiter, after a confirmation on a terminal, or with --yes; inspect then
// shows who forced which token. A "no", a non-terminal without --yes and a
// missing --force change nothing.
func TestUnlockForce(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, addr, prefix, name := t.Context(), b.Client.Options().Addr, "cli-unlock", testenv.Unique(t)
		// Renewed every 200 ms, with a TTL no loaded scheduler outlasts: a
		// forced lease ends by the renewal that finds it forced (ErrGone),
		// and one left alone stays held however slow the CLI runs are.
		locks, err := reentrant.New(b.Client, reentrant.WithPrefix(prefix), reentrant.WithTTL(time.Minute),
			tuning.RenewInterval(200*time.Millisecond).(reentrant.CallOption))
		require.NoError(t, err)
		t.Cleanup(func() { _ = locks.Close() })
		args := []string{"unlock", "--force", name, "--redis", addr, "--prefix", prefix}

		// Free: nothing to force.
		code, out, errOut := cli(t, ctx, append(args, "--yes")...)
		require.Equal(t, exitOK, code, errOut)
		require.Contains(t, out, "is free: nothing to force\nno state under prefix cli-unlock (")

		held, err := locks.Lock(ctx, name, reentrant.WithMetadata("stuck job"))
		require.NoError(t, err)
		stale := held.Token()

		// Refusals leave the holder alone.
		asTerminal(t, "n\n")
		code, out, _ = cli(t, ctx, args...)
		require.Equal(t, exitFailure, code)
		require.Contains(t, out, "token "+stale.String())
		require.Contains(t, out, "stuck job")
		stdinIsTerminal = func() bool { return false }
		code, _, errOut = cli(t, ctx, args...)
		require.Equal(t, exitUsage, code)
		require.Contains(t, errOut, "--yes")
		code, _, errOut = cli(t, ctx, "unlock", name, "--redis", addr, "--prefix", prefix, "--yes")
		require.Equal(t, exitUsage, code)
		require.Contains(t, errOut, "--force")
		require.NoError(t, held.Err(), "nothing was forced")

		// A waiter queues; the operator confirms on a terminal.
		got := make(chan *reentrant.Lease, 1)
		go func() {
			l, err := locks.Lock(ctx, name)
			if err != nil {
				t.Errorf("the waiter: %v", err)
			}
			got <- l
		}()
		require.Eventually(t, func() bool {
			st, err := locks.Inspect(ctx, name)
			return err == nil && st.Waiters == 1
		}, 20*time.Second, 10*time.Millisecond)
		asTerminal(t, "yes\n")
		code, out, errOut = cli(t, ctx, args...)
		require.Equal(t, exitOK, code, errOut)
		require.Contains(t, out, "forced: the ownership with token "+stale.String()+" ended")

		var next *reentrant.Lease
		select {
		case next = <-got:
		case <-time.After(20 * time.Second):
			t.Fatal("the waiter never got the forced lock")
		}
		require.NotNil(t, next)
		require.Greater(t, next.Token(), stale)
		store := memory.New()
		require.NoError(t, store.Put(ctx, "r", []byte("new"), next.Token()))
		require.ErrorIs(t, store.Put(ctx, "r", []byte("late"), stale), fence.ErrStale)
		select {
		case <-held.Context().Done():
		case <-time.After(30 * time.Second):
			t.Fatal("the forced lease never ended")
		}
		require.ErrorIs(t, held.Err(), reentrant.ErrGone)

		v := inspectBoth(t, addr, prefix, name)
		require.NotNil(t, v.Forced)
		require.Equal(t, uint64(stale), v.Forced.Token)
		require.Contains(t, v.Forced.By, "redfence unlock by ")
		at, err := time.Parse(time.RFC3339, v.Forced.At)
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), at, time.Hour)
		_, text, _ := cli(t, ctx, "inspect", name, "--redis", addr, "--prefix", prefix)
		require.Contains(t, text, "forced      token "+stale.String()+" at ")

		// --yes forces without asking; the current holder this time.
		stdinIsTerminal = func() bool { return false }
		code, _, errOut = cli(t, ctx, append(args, "--yes")...)
		require.Equal(t, exitOK, code, errOut)
		select {
		case <-next.Context().Done():
		case <-time.After(30 * time.Second):
			t.Fatal("the second forced lease never ended")
		}
		require.ErrorIs(t, next.Err(), reentrant.ErrGone)
	})
}

// withStdin runs the command with f as its real stdin, and the real
// terminal check.
func withStdin(t *testing.T, f *os.File) {
	t.Helper()
	old := os.Stdin
	os.Stdin = f
	t.Cleanup(func() { os.Stdin = old })
}

// Without --yes, unlock refuses with a usage error (exit 2) when stdin is
// /dev/null (a character device, not a terminal: cron, ssh -n) or a pipe,
// and asks nothing; with --yes it forces the lock from either.
func TestUnlockWithoutTerminal(t *testing.T) {
	_, rdb := testenv.Mini(t)
	ctx, addr, prefix, name := t.Context(), rdb.Options().Addr, "cli-unlock", testenv.Unique(t)
	// A short TTL: the forced holder learns of it at its next renewal.
	locks, err := reentrant.New(rdb, reentrant.WithPrefix(prefix), reentrant.WithTTL(600*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = locks.Close() })
	args := []string{"unlock", "--force", name, "--redis", addr, "--prefix", prefix}

	null, err := os.Open(os.DevNull)
	require.NoError(t, err)
	t.Cleanup(func() { _ = null.Close() })
	r, w, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(); _ = w.Close() })
	_, err = w.WriteString("y\n") // what a pipe might hold; it must not count as a yes
	require.NoError(t, err)

	for _, in := range []*os.File{null, r} {
		held, err := locks.Lock(ctx, name)
		require.NoError(t, err)
		withStdin(t, in)
		code, out, errOut := cli(t, ctx, args...)
		require.Equal(t, exitUsage, code, "stdin %s: %s", in.Name(), out)
		require.Contains(t, errOut, "stdin is not a terminal: give --yes")
		require.NotContains(t, out, "[y/N]", "asked a question no one can answer")
		require.NoError(t, held.Err(), "nothing was forced")

		code, out, errOut = cli(t, ctx, append(args, "--yes")...)
		require.Equal(t, exitOK, code, errOut)
		require.Contains(t, out, "forced: the ownership with token "+held.Token().String()+" ended")
		require.Eventually(t, func() bool { return held.Err() != nil }, 20*time.Second, 10*time.Millisecond)
	}
}
