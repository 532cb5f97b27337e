package reentrant_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/reentrant"
)

// Retry strategies: NoRetry never queues, LimitRetry gives up after its
// polls and leaves the queue, and a handoff still wakes a waiter at once.
func TestRetryStrategies(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, name := t.Context(), testenv.Unique(t)
		c := newClient(t, b.Client)
		l, err := c.Lock(ctx, name)
		require.NoError(t, err)

		_, err = c.Lock(ctx, name, reentrant.WithRetry(reentrant.NoRetry()))
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		require.NotErrorIs(t, err, context.DeadlineExceeded)

		var mu sync.Mutex
		var polls []int
		counting := reentrant.RetryFunc(func(n int) time.Duration {
			mu.Lock()
			polls = append(polls, n)
			mu.Unlock()
			return reentrant.LinearBackoff(20 * time.Millisecond).Backoff(n)
		})
		start := time.Now()
		_, err = c.Lock(ctx, name, reentrant.WithRetry(reentrant.LimitRetry(counting, 3)))
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		require.ErrorContains(t, err, "gave up after 3 polls")
		require.GreaterOrEqual(t, time.Since(start), 60*time.Millisecond)
		require.Equal(t, []int{1, 2, 3}, polls, "one backoff per poll, the fourth refused by the limit")
		st, err := c.Inspect(ctx, name)
		require.NoError(t, err)
		require.Zero(t, st.Waiters, "a waiter that gives up leaves the queue")

		got := queuedLock(t, ctx, c, name, reentrant.WithRetry(reentrant.LinearBackoff(time.Hour)))
		require.NoError(t, l.Unlock(ctx))
		require.NoError(t, handed(t, got, "a handoff must wake a waiter whatever its backoff").Unlock(ctx))
	})
}

func TestRetryStrategyBackoffs(t *testing.T) {
	e := reentrant.ExponentialBackoff(10*time.Millisecond, 70*time.Millisecond)
	var got []time.Duration
	for n := 1; n <= 5; n++ {
		got = append(got, e.Backoff(n))
	}
	require.Equal(t, []time.Duration{10, 20, 40, 70, 70}, scale(got, time.Millisecond))
	require.Equal(t, 5*time.Millisecond, reentrant.LinearBackoff(5*time.Millisecond).Backoff(1000))
	require.Zero(t, reentrant.NoRetry().Backoff(1))
	lim := reentrant.LimitRetry(reentrant.LinearBackoff(time.Second), 2)
	require.Equal(t, []time.Duration{time.Second, time.Second, 0}, []time.Duration{lim.Backoff(1), lim.Backoff(2), lim.Backoff(3)})
	require.Zero(t, reentrant.LimitRetry(reentrant.LinearBackoff(time.Second), 0).Backoff(1))
	require.Equal(t, time.Duration(1<<62), reentrant.ExponentialBackoff(time.Second, 1<<62).Backoff(1<<30), "no overflow")
}

func scale(ds []time.Duration, unit time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d / unit
	}
	return out
}

// A waiter whose strategy polls seldom still keeps its place: it polls at
// least every quarter of the queue's expiry, so the queue outlives the wait.
func TestSlowRetryKeepsItsPlace(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, name := t.Context(), testenv.Unique(t)
		// The queue expires 2 TTLs + the handoff timeout after a poll: 2.1 s.
		c := newClient(t, b.Client, reentrant.WithTTL(time.Second), reentrant.WithHandoffTimeout(100*time.Millisecond))
		l, err := c.Lock(ctx, name)
		require.NoError(t, err)
		got := queuedLock(t, ctx, c, name, reentrant.WithRetry(reentrant.LinearBackoff(time.Hour)))
		time.Sleep(4500 * time.Millisecond) // twice the queue's expiry
		st, err := c.Inspect(ctx, name)
		require.NoError(t, err)
		require.EqualValues(t, 1, st.Waiters, "the waiter's place must not expire while it waits")
		_, err = newClient(t, b.Client).TryLock(ctx, name)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		require.NoError(t, l.Unlock(ctx))
		require.NoError(t, handed(t, got, "the handoff must reach the waiter").Unlock(ctx))
	})
}

// A waiting call refused as too deep leaves the queue: the lock is never
// handed to a call that has returned.
func TestTooDeepWaiterLeavesTheQueue(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, name := t.Context(), testenv.Unique(t)
		c := newClient(t, b.Client)
		holder, err := c.Lock(ctx, name)
		require.NoError(t, err)
		octx := reentrant.WithOwner(ctx, reentrant.NewOwner())
		type res struct {
			l   *reentrant.Lease
			err error
		}
		out := make(chan res, 2)
		for range 2 {
			go func() {
				l, err := c.Lock(octx, name, reentrant.WithMaxDepth(1))
				out <- res{l, err}
			}()
		}
		require.Eventually(t, func() bool { st, _ := c.Inspect(ctx, name); return st.Waiters == 2 }, 5*time.Second, 5*time.Millisecond)
		require.NoError(t, holder.Unlock(ctx))
		first, second := <-out, <-out
		if first.err != nil {
			first, second = second, first
		}
		require.NoError(t, first.err)
		require.ErrorIs(t, second.err, reentrant.ErrTooDeep, "the second call of the same owner would reenter past the bound")
		st, err := c.Inspect(ctx, name)
		require.NoError(t, err)
		require.Zero(t, st.Waiters, "the refused call must leave the queue")
		require.NoError(t, first.l.Unlock(ctx))
		st, err = c.Inspect(ctx, name)
		require.NoError(t, err)
		require.False(t, st.Held, "nothing is handed to a call that has returned")
	})
}

// queuedLock starts Lock(ctx, name, opts...) on c, returns once the call is
// queued, and delivers the lease it gets (nil if it failed the test).
func queuedLock(t *testing.T, ctx context.Context, c *reentrant.Client, name string, opts ...reentrant.CallOption) <-chan *reentrant.Lease {
	t.Helper()
	got := make(chan *reentrant.Lease, 1)
	go func() {
		l, err := c.Lock(ctx, name, opts...)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	require.Eventually(t, func() bool { st, _ := c.Inspect(ctx, name); return st.Waiters == 1 }, 5*time.Second, 5*time.Millisecond)
	return got
}

// handed waits for the lease a queuedLock gets, at most 5 s.
func handed(t *testing.T, got <-chan *reentrant.Lease, why string) *reentrant.Lease {
	t.Helper()
	select {
	case l := <-got:
		require.NotNil(t, l)
		return l
	case <-time.After(5 * time.Second):
		t.Fatal(why)
	}
	return nil
}
