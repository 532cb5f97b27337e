package reentrant_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// slow is far above anything a notified wake-up takes, so a waiter that
// only wakes by polling is caught without timing the fast path.
const slow = 20 * time.Second

func TestLockWakesOnRelease(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := newClient(t, b.Client, reentrant.WithMaxRetryDelay(slow), reentrant.WithHandoffTimeout(4*slow))
		name := testenv.Unique(t)
		held, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		unlocked := make(chan error, 1)
		go func() {
			time.Sleep(100 * time.Millisecond)
			unlocked <- held.Unlock(context.Background())
		}()
		start := time.Now()
		l, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		require.Less(t, time.Since(start), slow/2, "the waiter was not woken by the release")
		require.NoError(t, <-unlocked)
		require.Greater(t, l.Token(), held.Token())
		require.NoError(t, l.Unlock(t.Context()))
	})
}

func TestLockWakesOnExpiry(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		holder := newClient(t, b.Client, reentrant.WithTTL(300*time.Millisecond), reentrant.WithoutRenewal())
		c := newClient(t, b.Client, reentrant.WithMaxRetryDelay(slow))
		name := testenv.Unique(t)
		held, err := holder.Lock(t.Context(), name)
		require.NoError(t, err)
		if b.Mini != nil {
			// miniredis expires keys only when told; the waiter must still
			// find out by itself once the TTL it was given has passed.
			// The goroutine ends before the test does: on a loaded machine
			// the waiter can take the lock by the server's clock first, and
			// a goroutine left over would advance a miniredis closed by then.
			expired := make(chan struct{})
			go func() {
				defer close(expired)
				time.Sleep(50 * time.Millisecond)
				b.Expire(time.Second)
			}()
			defer func() { <-expired }()
		}
		start := time.Now()
		l, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		require.Less(t, time.Since(start), slow/2, "the waiter did not wake when the holder's TTL ran out")
		require.Greater(t, l.Token(), held.Token())
	})
}

func TestLockCancelEndsWait(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := newClient(t, b.Client, reentrant.WithMaxRetryDelay(slow))
		name := testenv.Unique(t)
		_, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = c.Lock(ctx, name)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), slow/2)
	})
}

// renewalTTL and renewalEvery are the lease of the tests that check
// renewal keeps a lock past its TTL: renewed every 100 ms, a renewal may
// come 980 ms late before the 1080 ms local deadline passes, room a
// machine with its CPU saturated beside the suite keeps (300 ms and 600 ms
// TTLs renewed at a third of them once did not).
const renewalTTL, renewalEvery = 1200 * time.Millisecond, 100 * time.Millisecond

// elapse lets d pass on this process's clock and on the server's: a real
// Redis's clock runs by itself, miniredis's is moved on. (Backend.Expire
// would sleep d a second time on a real Redis.)
func elapse(b testenv.Backend, d time.Duration) {
	time.Sleep(d)
	if b.Mini != nil {
		testenv.Advance(b.Mini, d)
	}
}

func TestRenewalKeepsLease(t *testing.T) {
	t.Parallel() // see TestMain
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := newClient(t, b.Client, reentrant.WithTTL(renewalTTL), reentrant.WithRenewInterval(renewalEvery))
		name := testenv.Unique(t)
		l, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		for range 6 { // one and a half TTLs
			elapse(b, renewalTTL/4)
			require.NoError(t, l.Err())
		}
		st, err := c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.Equal(t, l.Token(), st.Token, "renewal must keep the lock past its TTL")
		require.NoError(t, l.Unlock(t.Context()))
	})
}

// A renewal that finds the lock deleted ends the lease with ErrGone. The
// lease is renewed every 100 ms with a TTL no loaded scheduler outlasts:
// only the renewal, not the local timer, can end it.
func TestRenewalDetectsLoss(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := newClient(t, b.Client, reentrant.WithTTL(time.Minute), reentrant.WithRenewInterval(100*time.Millisecond))
		name := testenv.Unique(t)
		outer, inner := nested(t, c, name)
		// Someone deletes the lock (an operator, a FLUSHDB, a failover).
		require.NoError(t, b.Client.Del(t.Context(), scripts.KeysFor(prefix, name).Lock).Err())
		for _, l := range []*reentrant.Lease{outer, inner} {
			select {
			case <-l.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("loss not reported")
			}
			require.ErrorIs(t, l.Err(), reentrant.ErrGone)
			require.ErrorIs(t, l.Err(), reentrant.ErrNotHeld)
			require.ErrorIs(t, l.Context().Err(), context.Canceled)
		}
		require.ErrorIs(t, inner.Unlock(t.Context()), reentrant.ErrNotHeld)
		require.ErrorIs(t, outer.Extend(t.Context(), time.Second), reentrant.ErrNotHeld)
	})
}

// When Redis stops answering, the holder is told the lease is lost before
// Redis could hand the lock to anyone else: the lease ends at its local
// deadline, which comes before the lock's expiry in Redis.
//
// Both instants are read while nothing can move them: the hook holds the
// next renewal (the lease has at most one in flight, so the one before it
// has settled), Redis's expiry is read, then the client is closed under the
// held renewal and every renewal from then on fails.
func TestRenewalFailureReportedBeforeExpiry(t *testing.T) {
	rdb := testenv.Redis(t)
	lockRdb := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, MaxRetries: -1})
	h := &traffic{}
	lockRdb.AddHook(h)
	c := newClient(t, lockRdb, reentrant.WithTTL(1500*time.Millisecond))
	name := testenv.Unique(t)
	l, err := c.Lock(t.Context(), name)
	require.NoError(t, err)
	waitRenewed(t, l, 0)
	held, release := h.holdNext()
	t.Cleanup(release)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("no renewal was sent")
	}
	// The hold's own expiry is the lease (lua/lib.lua): when it ends,
	// server time in ms.
	expiry, err := rdb.PExpireTime(t.Context(), scripts.KeysFor(prefix, name).Lock).Result()
	require.NoError(t, err)
	require.Positive(t, expiry, "the lock must still be held in Redis, with a lease")
	require.NoError(t, lockRdb.Close())
	release()
	awaitDone(t, l, 30*time.Second)
	require.ErrorIs(t, l.Err(), reentrant.ErrUnconfirmed)
	require.ErrorIs(t, l.Err(), redis.ErrClosed, "the cause must carry the Redis error")
	deadline, expires := reentrant.LocalDeadline(l), time.UnixMilli(expiry.Milliseconds())
	require.True(t, deadline.Before(expires),
		"the lease ended at %v, not before the lock's expiry in Redis at %v", deadline, expires)
	t.Logf("the lease ended %v before Redis's expiry", expires.Sub(deadline))
}

func TestUnreachableRedis(t *testing.T) {
	before := runtime.NumGoroutine()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	c, err := reentrant.New(rdb)
	require.NoError(t, err)
	_, err = c.Lock(t.Context(), "x")
	require.Error(t, err)
	require.NotErrorIs(t, err, reentrant.ErrNotAcquired, "an unreachable Redis is not a held lock")
	_, err = c.TryLock(t.Context(), "x")
	require.Error(t, err)
	_, err = c.Inspect(t.Context(), "x")
	require.Error(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, rdb.Close())
	settle(t, before)
}

// Closing the go-redis client while Lock waits ends the wait with an error.
func TestRedisClosedMidWait(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		before := runtime.NumGoroutine()
		addr := b.Client.Options().Addr
		holderRdb := redis.NewClient(&redis.Options{Addr: addr})
		defer holderRdb.Close()
		holder := newClient(t, holderRdb)
		name := testenv.Unique(t)
		held, err := holder.Lock(t.Context(), name)
		require.NoError(t, err)

		rdb := redis.NewClient(&redis.Options{Addr: addr})
		c, err := reentrant.New(rdb, reentrant.WithPrefix(prefix), reentrant.WithMaxRetryDelay(200*time.Millisecond))
		require.NoError(t, err)
		var wg sync.WaitGroup
		var lockErr error
		wg.Go(func() { _, lockErr = c.Lock(t.Context(), name) })
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, rdb.Close())
		wg.Wait()
		require.ErrorIs(t, lockErr, redis.ErrClosed)
		require.NoError(t, c.Close())
		require.NoError(t, held.Unlock(t.Context()))
		require.NoError(t, holder.Close())
		require.NoError(t, holderRdb.Close())
		settle(t, before)
	})
}

// settle fails the test if goroutines started since before do not exit.
func settle(t *testing.T, before int) {
	t.Helper()
	if !testenv.Await(30*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
		buf := make([]byte, 1<<16)
		t.Fatalf("goroutine leak: %d > %d\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
	}
}

// A deadline that passes during a Redis call may surface first as the
// socket's i/o timeout; the error must still name the deadline.
func TestLockShortDeadlinesAlwaysReportTheDeadline(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, name := newClient(t, b.Client), testenv.Unique(t)
		_, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		for i := range 300 {
			ctx, cancel := context.WithTimeout(t.Context(), time.Duration(i%5)*200*time.Microsecond)
			_, err := c.Lock(ctx, name)
			cancel()
			// Refused, or, when the deadline cut an attempt in flight (a
			// loaded machine), outcome unknown: never both, always with
			// the deadline.
			require.NotEqual(t, errors.Is(err, reentrant.ErrNotAcquired), errors.Is(err, reentrant.ErrOutcomeUnknown), "attempt %d: %v", i, err)
			require.ErrorIs(t, err, context.DeadlineExceeded, "attempt %d", i)
		}
	})
}

// The context given to Lock bounds the wait only: a lease acquired under a
// deadline keeps being renewed after that deadline and its cancellation.
// The renewals are what the test waits for (a long TTL, so that a loaded
// machine's late renewal cannot end the lease instead).
func TestLockContextBoundsOnlyTheWait(t *testing.T) {
	t.Parallel() // see TestMain
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := newClient(t, b.Client, reentrant.WithTTL(time.Minute), reentrant.WithRenewInterval(renewalEvery))
		name := testenv.Unique(t)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		l, err := c.Lock(ctx, name)
		require.NoError(t, err)
		cancel()
		<-ctx.Done()
		// Renewed past where the lease stood at the cancellation, by more
		// than the time since: renewals sent after the context ended.
		waitRenewed(t, l, time.Second)
		require.NoError(t, l.Err(), "the lease must outlive the context it was acquired with")
		_, err = c.TryLock(t.Context(), name)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired, "renewal must have kept the lock")
		owner, ok := reentrant.OwnerFrom(l.Context())
		require.True(t, ok)
		require.Equal(t, l.Owner(), owner, "the lease context keeps the caller's values and the owner")
		require.NoError(t, l.Unlock(t.Context()))
	})
}

func TestDoCallbackEndsWithCallerContext(t *testing.T) {
	_, rdb := testenv.Mini(t)
	c := newClient(t, rdb)
	ctx, cancel := context.WithCancel(t.Context())
	err := c.Do(ctx, "x", func(fctx context.Context, _ fence.Token) error {
		cancel()
		<-fctx.Done()
		return fctx.Err()
	})
	require.ErrorIs(t, err, context.Canceled)
	st, err := c.Inspect(t.Context(), "x")
	require.NoError(t, err)
	require.False(t, st.Held, "Do must unlock even when its context was cancelled")
}

// delayArmed is a go-redis hook that holds back, for d, the reply of the
// first script call made after arm, as a stalled server would.
type delayArmed struct {
	d     time.Duration
	armed atomic.Bool
}

func (h *delayArmed) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *delayArmed) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if testenv.ScriptCall(cmd.Name()) && h.armed.CompareAndSwap(true, false) {
			time.Sleep(h.d)
		}
		return err
	}
}
func (h *delayArmed) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A Lock whose acquisition is answered past the lease's safe window (the
// grant is undone, since its lease would already be over) waits on within
// its context, as Lock promises, instead of returning ErrNotAcquired; a
// TryLock answers at once.
func TestLockWaitsOnAfterALateAnswer(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		const ttl = 300 * time.Millisecond
		rdb := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
		t.Cleanup(func() { _ = rdb.Close() })
		h := &delayArmed{d: ttl}
		h.armed.Store(true)
		rdb.AddHook(h)
		c := newClient(t, rdb, reentrant.WithTTL(ttl), reentrant.WithoutRenewal())
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		l, err := c.Lock(ctx, testenv.Unique(t))
		require.NoError(t, err, "Lock must wait on after a late answer")
		require.False(t, h.armed.Load(), "the first answer was held back")
		require.NoError(t, l.Unlock(ctx))

		h2 := &delayArmed{d: ttl}
		h2.armed.Store(true)
		rdb2 := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
		t.Cleanup(func() { _ = rdb2.Close() })
		rdb2.AddHook(h2)
		c2 := newClient(t, rdb2, reentrant.WithTTL(ttl), reentrant.WithoutRenewal())
		_, err = c2.TryLock(ctx, testenv.Unique(t))
		require.ErrorIs(t, err, reentrant.ErrNotAcquired, "TryLock answers at once")
	})
}

// A Lock with a plain context on a name its own Client holds for another
// owner waits on that hold (reentry goes by the owner in the context), and
// its error says so and names the way out; a refusal because another
// Client holds the name does not. Both stay ErrNotAcquired, the Lock's
// with the context's error.
func TestRefusalOnOwnClientSaysSo(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		assertSelfWaitHint(t, newClient(t, b.Client), newClient(t, b.Client))
	})
	t.Run("redlock", func(t *testing.T) {
		_, nodes := redlockNodes(t, 3)
		assertSelfWaitHint(t, newRedlock(t, nodes), newRedlock(t, nodes))
	})
}

func assertSelfWaitHint(t *testing.T, c, other *reentrant.Client) {
	const hint = "held by this Client under another owner; pass the lease's Context() to reenter"
	ctx, name := t.Context(), testenv.Unique(t)
	held, err := c.Lock(ctx, name)
	require.NoError(t, err)

	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = c.Lock(wctx, name)
	require.ErrorIs(t, err, reentrant.ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// A loaded machine can add the undo's own outcome after the context's
	// error; the message still starts as documented, on one line.
	require.True(t, strings.HasPrefix(err.Error(), `reentrant: lock "`+name+`": not acquired: `+hint+`: context deadline exceeded`), err.Error())
	require.NotContains(t, err.Error(), "\n")
	_, err = c.TryLock(ctx, name)
	require.ErrorIs(t, err, reentrant.ErrNotAcquired)
	require.EqualError(t, err, `reentrant: trylock "`+name+`": not acquired: `+hint)

	octx, ocancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer ocancel()
	_, err = other.Lock(octx, name)
	require.ErrorIs(t, err, reentrant.ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotContains(t, err.Error(), "this Client")
	_, err = other.TryLock(ctx, name)
	require.ErrorIs(t, err, reentrant.ErrNotAcquired)
	require.NotContains(t, err.Error(), "this Client")

	// The hint's way out works, and once the hold is gone the hint is too.
	inner, err := c.Lock(held.Context(), name)
	require.NoError(t, err)
	require.NoError(t, inner.Unlock(ctx))
	require.NoError(t, held.Unlock(ctx))
	theirs, err := other.Lock(ctx, name)
	require.NoError(t, err)
	_, err = c.TryLock(ctx, name)
	require.ErrorIs(t, err, reentrant.ErrNotAcquired)
	require.NotContains(t, err.Error(), "this Client")
	require.NoError(t, theirs.Unlock(ctx))
}
