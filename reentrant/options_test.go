package reentrant_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// A call's TTL applies to that call's ownership only: Redis holds it for
// that long, its renewals extend it by that much, and the client's other
// calls keep the client's TTL.
func TestPerCallTTL(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx := t.Context()
		c := newClient(t, b.Client, reentrant.WithTTL(time.Minute))
		// The long lease first: the renewer then ticks for a one-minute
		// TTL, and the short lease taken next must make it tick sooner.
		long, err := c.Lock(ctx, testenv.Unique(t))
		require.NoError(t, err)
		const ttl = 3 * time.Second
		short, err := c.Lock(ctx, testenv.Unique(t), reentrant.WithTTL(ttl))
		require.NoError(t, err)
		d, err := short.TTL(ctx)
		require.NoError(t, err)
		require.LessOrEqual(t, d, ttl)
		d, err = long.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, d, 50*time.Second, "the client's default is untouched")
		// Renewed at a third of the call's TTL (1 s, on ticks of a quarter
		// of that), by that TTL. Renewed at the client's interval (20 s),
		// or on the one-minute TTL's ticks (5 s), it would end at its local
		// deadline first (2.7 s), which waitRenewed reports; a renewal
		// that is merely late on a loaded machine has 1.7 s of room.
		waitRenewed(t, short, 0)
		d, err = short.TTL(ctx)
		require.NoError(t, err)
		require.LessOrEqual(t, d, ttl, "a renewal extends by the call's TTL, not more")
		require.NoError(t, short.Unlock(ctx))
		require.NoError(t, long.Unlock(ctx))
	})
}

// Options a call cannot take are not CallOptions, so giving one to a call
// does not compile; every CallOption is a ClientOption too. Bad values are
// refused per call.
func TestCallOptionsRefused(t *testing.T) {
	for _, o := range []reentrant.ClientOption{reentrant.WithPrefix("x"), reentrant.WithStrictTokens(),
		reentrant.WithHandoffTimeout(time.Second), reentrant.WithLogger(slog.Default()),
		reentrant.WithEvictionAllowed(), reentrant.WithRetryJitter(0), reentrant.WithMaxRetryDelay(time.Second),
		reentrant.WithReplicaAck(1, time.Millisecond), reentrant.WithRejoinDelay(time.Minute),
		reentrant.WithObserver(func(reentrant.Event) {}), reentrant.WithIdentity("x"),
	} {
		_, isCall := o.(reentrant.CallOption)
		require.False(t, isCall, "%T is a client option", o)
	}
	for _, o := range []reentrant.ClientOption{reentrant.WithTTL(time.Second), reentrant.WithRenewInterval(time.Second),
		reentrant.WithoutRenewal(), reentrant.WithSafetyMargin(time.Second), reentrant.WithRetry(reentrant.NoRetry()),
		reentrant.WithMetadata("m"), reentrant.WithMaxDepth(1),
	} {
		_, isCall := o.(reentrant.CallOption)
		require.True(t, isCall, "%T applies per call", o)
	}

	_, rdb := testenv.Mini(t)
	c := newClient(t, rdb)
	ctx := t.Context()
	for _, o := range []reentrant.CallOption{nil,
		reentrant.WithTTL(0), reentrant.WithMaxDepth(0), reentrant.WithMetadata("a\nb"),
		reentrant.WithMetadata(strings.Repeat("m", reentrant.MaxMetadataLen+1)), reentrant.WithRetry(nil),
		reentrant.WithRetry(reentrant.LinearBackoff(0)), reentrant.WithRetry(reentrant.ExponentialBackoff(time.Second, time.Millisecond)),
		reentrant.WithRetry(reentrant.LimitRetry(reentrant.NoRetry(), -1)),
	} {
		name := testenv.Unique(t)
		_, err := c.Lock(ctx, name, o)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		require.NotContains(t, err.Error(), "\n")
		st, ierr := c.Inspect(ctx, name)
		require.NoError(t, ierr)
		require.False(t, st.Held, "a refused option acquires nothing")
	}
	// A call's TTL must leave room for the client's explicit renew interval.
	slow := newClient(t, rdb, reentrant.WithTTL(time.Minute), reentrant.WithRenewInterval(5*time.Second))
	_, err := slow.Lock(ctx, "n", reentrant.WithTTL(time.Second))
	require.ErrorIs(t, err, reentrant.ErrInvalid)
	require.ErrorContains(t, err, "renew interval 5s is not shorter than the TTL 1s")
	l, err := slow.Lock(ctx, "n", reentrant.WithTTL(time.Second), reentrant.WithRenewInterval(300*time.Millisecond))
	require.NoError(t, err, "unless the call sets its own")
	require.NoError(t, l.Unlock(ctx))
	_, err = reentrant.New(rdb, reentrant.WithMetadata("ok"), reentrant.WithMaxDepth(3), reentrant.WithRetry(reentrant.NoRetry()))
	require.NoError(t, err, "every call option is a client default too")
}

// Metadata is stored with the ownership the call starts, shown by Inspect,
// kept by a reentry, carried through a handoff to a waiter, and gone with
// the ownership.
func TestMetadata(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, name := t.Context(), testenv.Unique(t)
		c := newClient(t, b.Client, reentrant.WithMetadata("client default"))
		l, err := c.Lock(ctx, name, reentrant.WithMetadata("job 1842 ✓"))
		require.NoError(t, err)
		inner, err := c.Lock(l.Context(), name, reentrant.WithMetadata("ignored"))
		require.NoError(t, err)
		st, err := c.Inspect(ctx, name)
		require.NoError(t, err)
		require.Equal(t, "job 1842 ✓", st.Meta)
		require.NoError(t, inner.Unlock(ctx))

		got := queuedLock(t, ctx, c, name, reentrant.WithMetadata("waiter"))
		require.NoError(t, l.Unlock(ctx))
		w := handed(t, got, "the waiter must be handed the lock")
		st, err = c.Inspect(ctx, name)
		require.NoError(t, err)
		require.Equal(t, "waiter", st.Meta, "the handoff carries the waiter's metadata")
		require.NoError(t, w.Unlock(ctx))
		st, err = c.Inspect(ctx, name)
		require.NoError(t, err)
		require.Empty(t, st.Meta)

		d, err := c.Lock(ctx, name)
		require.NoError(t, err)
		st, err = c.Inspect(ctx, name)
		require.NoError(t, err)
		require.Equal(t, "client default", st.Meta)
		require.NoError(t, d.Unlock(ctx))
	})
}

// WithMaxDepth bounds reentry in Redis: the reentry past it fails with
// ErrTooDeep and changes nothing, the hold keeps working, and the default
// bound stops runaway recursion.
func TestMaxDepth(t *testing.T) {
	t.Parallel() // see TestMain
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, name := t.Context(), testenv.Unique(t)
		c := newClient(t, b.Client)
		l, err := c.Lock(ctx, name, reentrant.WithMaxDepth(3))
		require.NoError(t, err)
		var held []*reentrant.Lease
		for range 2 {
			in, err := c.TryLock(l.Context(), name, reentrant.WithMaxDepth(3))
			require.NoError(t, err)
			held = append(held, in)
		}
		_, err = c.Lock(l.Context(), name, reentrant.WithMaxDepth(3))
		require.ErrorIs(t, err, reentrant.ErrTooDeep)
		require.ErrorContains(t, err, `reentrant: lock "`+name+`": reentry too deep`)
		st, err := c.Inspect(ctx, name)
		require.NoError(t, err)
		require.EqualValues(t, 3, st.Depth, "a refused reentry writes nothing")
		require.NoError(t, held[1].Unlock(ctx))
		again, err := c.TryLock(l.Context(), name, reentrant.WithMaxDepth(3))
		require.NoError(t, err, "a level freed below the bound can be taken again")
		require.Equal(t, l.Token(), again.Token())
		for _, x := range []*reentrant.Lease{again, held[0], l} {
			require.NoError(t, x.Unlock(ctx))
		}

		// The default bound: recursion without end stops at DefaultMaxDepth
		// (on the real server too: the check is the script's).
		l, err = c.Lock(ctx, name)
		require.NoError(t, err)
		lctx, depth := l.Context(), int64(1)
		for {
			in, err := c.TryLock(lctx, name)
			if err != nil {
				require.ErrorIs(t, err, reentrant.ErrTooDeep)
				break
			}
			depth = in.Depth()
		}
		require.EqualValues(t, reentrant.DefaultMaxDepth, depth)
	})
}

// Every error is one line that starts with the operation and the lock, and
// still matches its sentinels and the Redis error it wraps.
func TestErrorsAreOneLineNamingTheLock(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		name := "orders/42-" + testenv.Unique(t)
		c := newClient(t, b.Client)
		// Another Client holds the lock: a hold of c's own would add a hint.
		l, err := newClient(t, b.Client).Lock(t.Context(), name)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
		defer cancel()
		_, err = c.Lock(ctx, name)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		// On a loaded machine the undo of the queued attempt can outlast
		// its budget, and the error then says so after the context's.
		msg := err.Error()
		require.NotContains(t, msg, "\n", "one line")
		want := `reentrant: lock "` + name + `": not acquired: context deadline exceeded`
		if msg != want {
			require.Equal(t, want+": context deadline exceeded: the undo is still in flight", msg)
		}
		var op *reentrant.OpError
		require.ErrorAs(t, err, &op)
		require.Equal(t, "lock", op.Op)
		require.Equal(t, name, op.Name)
		require.ErrorIs(t, op.Err, reentrant.ErrNotAcquired)

		_, err = c.TryLock(t.Context(), name)
		require.Equal(t, `reentrant: trylock "`+name+`": not acquired: held by another owner or others wait for it`, err.Error())
		require.NoError(t, l.Unlock(t.Context()))
		err = l.Unlock(t.Context())
		require.ErrorIs(t, err, reentrant.ErrNotHeld)
		require.Equal(t, `reentrant: unlock "`+name+`": not held: lease already unlocked`, err.Error())

		require.NoError(t, b.Client.Set(t.Context(), scripts.KeysFor(prefix, name).Lock, "x", 0).Err())
		_, err = c.Lock(t.Context(), name)
		require.ErrorIs(t, err, reentrant.ErrForeign)
		var rerr interface{ RedisError() }
		require.True(t, errors.As(err, &rerr), "errors.As must find go-redis's error: %v", err)
		require.True(t, strings.HasPrefix(err.Error(), `reentrant: lock "`+name+`": lua: key holds a foreign value`), err.Error())
		require.NotContains(t, err.Error(), "\n")

		// Do returns fn's error as it is, and lists an Unlock failure after
		// it on the same line: here the lock was deleted and another owner
		// took it while fn ran.
		other := name + "-do"
		errFn := errors.New("fn failed")
		err = c.Do(t.Context(), other, func(context.Context, fence.Token) error { return errFn })
		require.Same(t, errFn, err)
		var taker *reentrant.Lease
		err = c.Do(t.Context(), other, func(ctx context.Context, _ fence.Token) error {
			require.NoError(t, b.Client.Del(ctx, scripts.KeysFor(prefix, other).Lock).Err())
			var terr error
			taker, terr = newClient(t, b.Client).TryLock(t.Context(), other)
			require.NoError(t, terr)
			return errFn
		})
		require.ErrorIs(t, err, errFn)
		require.ErrorIs(t, err, reentrant.ErrNotHeld)
		require.True(t, strings.HasPrefix(err.Error(), `fn failed; reentrant: unlock "`+other+`": not held`), err.Error())
		require.NoError(t, taker.Unlock(t.Context()))
		require.NotContains(t, err.Error(), "\n")
	})
}

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
	t.Parallel() // see TestMain
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, name := t.Context(), testenv.Unique(t)
		// The queue expires 2 TTLs + the handoff timeout after a poll: 2.1 s.
		c := newClient(t, b.Client, reentrant.WithTTL(time.Second), reentrant.WithHandoffTimeout(100*time.Millisecond))
		// The holder's lease is long: a loaded machine that delayed a
		// renewal of a 1 s one would hand the lock to the waiter early.
		l, err := c.Lock(ctx, name, reentrant.WithTTL(time.Minute))
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
