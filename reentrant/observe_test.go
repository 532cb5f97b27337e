package reentrant_test

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

// The logger hears about lost leases and failed renewals; the observer
// sees every event with its lock and token.
func TestLoggerAndObserver(t *testing.T) {
	m, rdb := testenv.Mini(t)
	var logs bytes.Buffer
	var mu sync.Mutex
	var events []reentrant.Event
	c := newClient(t, rdb, reentrant.WithTTL(time.Second), reentrant.WithRenewInterval(100*time.Millisecond),
		reentrant.WithLogger(slog.New(slog.NewTextHandler(&syncWriter{w: &logs, mu: &mu}, nil))),
		reentrant.WithObserver(func(e reentrant.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }))
	ctx, name := t.Context(), testenv.Unique(t)
	l, err := c.Lock(ctx, name)
	require.NoError(t, err)
	in, err := c.Lock(l.Context(), name)
	require.NoError(t, err)
	_, err = c.TryLock(ctx, name)
	require.ErrorIs(t, err, reentrant.ErrNotAcquired)
	require.Eventually(t, func() bool { return count(&mu, &events, reentrant.Renewed) > 0 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, in.Unlock(ctx))
	require.NoError(t, l.Unlock(ctx))

	l, err = c.Lock(ctx, name)
	require.NoError(t, err)
	m.Del(lua.KeysFor(prefix, name).Lock) // the lock vanishes: the next renewal finds it gone
	<-l.Done()
	require.Eventually(t, func() bool { return count(&mu, &events, reentrant.Lost) == 1 }, time.Second, 5*time.Millisecond)

	mu.Lock()
	defer mu.Unlock()
	kinds := map[reentrant.EventKind]int{}
	for _, e := range events {
		require.Equal(t, name, e.Name)
		kinds[e.Kind]++
		switch e.Kind {
		case reentrant.Acquired, reentrant.Reentered:
			require.NotZero(t, e.Token)
		case reentrant.NotAcquired:
			require.ErrorIs(t, e.Err, reentrant.ErrNotAcquired)
		case reentrant.Lost:
			require.ErrorIs(t, e.Err, reentrant.ErrLost)
		}
	}
	require.Equal(t, 2, kinds[reentrant.Acquired])
	require.Equal(t, 1, kinds[reentrant.Reentered])
	require.Equal(t, 1, kinds[reentrant.NotAcquired])
	require.Equal(t, 1, kinds[reentrant.Released], "one release: the reentry's Unlock released no lock")
	require.Contains(t, logs.String(), "level=WARN msg=\"reentrant: lease lost\" name="+name)
	require.Equal(t, "renew_failed", reentrant.RenewFailed.String())
}

func count(mu *sync.Mutex, events *[]reentrant.Event, k reentrant.EventKind) int {
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, e := range *events {
		if e.Kind == k {
			n++
		}
	}
	return n
}

type syncWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// A lock handed to a waiter is renewed at half its claim window, not at
// once: taking it must not cost a renewal round trip of its own.
func TestHandedLockNotRenewedAtOnce(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		var mu sync.Mutex
		var renewedAt []time.Time
		// An 8 s handoff timeout: the claim window is 4 s, so the first
		// renewal is due about 2 s after the wait began, far beyond what a
		// loaded scheduler adds between the handoff and the check below.
		c := newClient(t, b.Client, reentrant.WithTTL(time.Minute), reentrant.WithHandoffTimeout(8*time.Second),
			reentrant.WithObserver(func(e reentrant.Event) {
				if e.Kind == reentrant.Renewed {
					mu.Lock()
					renewedAt = append(renewedAt, time.Now())
					mu.Unlock()
				}
			}))
		ctx, name := t.Context(), testenv.Unique(t)
		other, err := c.Lock(ctx, name+"-other") // the renewer runs
		require.NoError(t, err)
		holder, err := c.Lock(ctx, name)
		require.NoError(t, err)
		got := queuedLock(t, ctx, c, name)
		require.NoError(t, holder.Unlock(ctx))
		taken := handed(t, got, "the waiter must be handed the lock")
		handedAt := time.Now()
		// A renewal made at once would be back well within 500 ms; the
		// first is due at half the claim window (about 2 s) after the
		// wait began. Each renewal's time is recorded, so a slow machine
		// that reaches the due time before the check only makes the check
		// see it late, never fail it.
		time.Sleep(500 * time.Millisecond)
		mu.Lock()
		for _, at := range renewedAt {
			require.GreaterOrEqual(t, at.Sub(handedAt), 500*time.Millisecond, "a handed lock was renewed at once")
		}
		mu.Unlock()
		require.NoError(t, taken.Unlock(ctx))
		require.NoError(t, other.Unlock(ctx))
	})
}
