//go:build unix

package reentrant_test

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/reentrant"
)

// A waiter process SIGKILLed while queued, or frozen and then killed after
// the lock was handed to it, delays the next waiter by about the handoff
// timeout (1 s by default), never by a TTL (30 s here).
func TestDeadWaiterDelaysNextByAtMostTheBound(t *testing.T) {
	addr := testenv.RedisAddr(t)
	for _, when := range []string{"queued", "handed"} {
		t.Run(when, func(t *testing.T) {
			rdb := testenv.Redis(t)
			pfx := testenv.Unique(t)
			c := newClient(t, rdb, reentrant.WithPrefix(pfx))
			name := "dead-waiter"
			held, err := c.Lock(t.Context(), name)
			require.NoError(t, err)

			child := exec.Command(os.Args[0], "-test.run=^$")
			child.Env = append(os.Environ(), helperWaiterVar+"="+addr+"|"+pfx+"|"+name)
			child.Stderr = os.Stderr
			require.NoError(t, child.Start())
			t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
			queued(t, c, name, 1)

			next := make(chan time.Time, 1)
			go func() {
				l, err := c.Lock(t.Context(), name)
				if assertNoErr(t, err) {
					next <- time.Now()
					_ = l.Unlock(context.Background())
				}
			}()
			queued(t, c, name, 2)

			var start time.Time
			switch when {
			case "queued":
				require.NoError(t, child.Process.Signal(syscall.SIGKILL))
				start = time.Now()
				require.NoError(t, held.Unlock(t.Context()))
			case "handed":
				// Frozen, it cannot claim the lock handed to it; then killed.
				// SIGSTOP takes effect asynchronously: wait until the child
				// is stopped, or it might still claim the lock.
				require.NoError(t, child.Process.Signal(syscall.SIGSTOP))
				require.NoError(t, testenv.WaitStopped(child.Process.Pid, time.Minute))
				require.NoError(t, held.Unlock(t.Context()))
				start = time.Now()
				st, err := c.Inspect(t.Context(), name)
				require.NoError(t, err)
				require.True(t, st.Held && reentrant.Owner(st.Owner) != held.Owner(), "the lock must be handed to the frozen waiter: %+v", st)
				require.NoError(t, child.Process.Signal(syscall.SIGKILL))
			}
			select {
			case got := <-next:
				delay := got.Sub(start)
				t.Logf("next waiter got the lock %v after the dead one's turn began", delay.Round(time.Millisecond))
				require.Less(t, delay, reentrant.DefaultHandoffTimeout+time.Second,
					"a dead waiter may delay the next by about the handoff timeout, not a TTL")
			case <-time.After(reentrant.DefaultTTL):
				t.Fatal("the next waiter never got the lock")
			}
		})
	}
}
