package reentrant_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

const prefix = "rftest"

func newClient(t *testing.T, rdb redis.UniversalClient, opts ...reentrant.ClientOption) *reentrant.Client {
	t.Helper()
	c, err := reentrant.New(rdb, append([]reentrant.ClientOption{reentrant.WithPrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitRenewed waits until l's local deadline has moved past where it was
// plus by, which only confirmed renewals move it: by zero, at least one
// renewal; by the TTL, l outlived its acquisition's lease on renewals. It
// fails at once if l ends, and after a minute if the deadline never moves.
func waitRenewed(t *testing.T, l *reentrant.Lease, by time.Duration) {
	t.Helper()
	from := reentrant.LocalDeadline(l)
	require.Eventually(t, func() bool {
		return l.Err() != nil || reentrant.LocalDeadline(l).After(from.Add(by))
	}, time.Minute, 5*time.Millisecond)
	require.NoError(t, l.Err(), "the lease ended instead of being renewed")
}

// assertShape checks the invariant after every acquire, reentry and extend
// in the strict mode: the lease runs, and neither the lock hash nor the
// counter expires.
func assertShape(t *testing.T, rdb redis.UniversalClient, name string) {
	t.Helper()
	k := lua.KeysFor(prefix, name)
	st, err := lua.Inspect(t.Context(), rdb, k)
	require.NoError(t, err)
	require.Greater(t, st.TTL, time.Duration(0), "the lease of %s must run", k.Lock)
	require.Equal(t, time.Duration(-1), rdb.PTTL(t.Context(), k.Lock).Val(), "lock hash %s must never expire", k.Lock)
	require.Equal(t, time.Duration(-1), rdb.PTTL(t.Context(), k.Counter).Val(), "counter %s must never expire", k.Counter)
}

func TestReentryKeepsTokenAndCountsDepth(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, name := newClient(t, b.Client), testenv.Unique(t)
		outer, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		assertShape(t, b.Client, name)
		require.EqualValues(t, 1, outer.Depth())
		require.NotZero(t, outer.Token())

		inner, err := c.Lock(outer.Context(), name)
		require.NoError(t, err)
		assertShape(t, b.Client, name)
		require.Equal(t, outer.Token(), inner.Token(), "reentry must keep the token")
		require.EqualValues(t, 2, inner.Depth())
		require.Equal(t, outer.Owner(), inner.Owner())

		third, err := c.TryLock(inner.Context(), name)
		require.NoError(t, err)
		require.EqualValues(t, 3, third.Depth())

		st, err := c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.True(t, st.Held)
		require.EqualValues(t, 3, st.Depth)
		require.Equal(t, outer.Token(), st.Token)
		require.Equal(t, outer.Token(), st.LastToken)
		require.Greater(t, st.TTL, time.Duration(0))

		// Another owner cannot take it while any depth remains, and unlock
		// order does not matter.
		_, err = c.TryLock(t.Context(), name)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		require.NoError(t, outer.Unlock(t.Context()))
		require.NoError(t, third.Unlock(t.Context()))
		_, err = c.TryLock(t.Context(), name)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		require.NoError(t, inner.Unlock(t.Context()))

		next, err := c.TryLock(t.Context(), name)
		require.NoError(t, err)
		require.Greater(t, next.Token(), outer.Token(), "a new ownership must get a higher token")
		require.NoError(t, next.Unlock(t.Context()))
		st, err = c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.Equal(t, reentrant.State{Name: name, LastToken: next.Token(), LastOwner: string(next.Owner()),
			Ended: []reentrant.Ended{{Owner: string(next.Owner()), Token: next.Token()}}}, st)
	})
}

func TestLeaseContextEndsOnUnlock(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, name := newClient(t, b.Client), testenv.Unique(t)
		outer, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		inner, err := c.Lock(outer.Context(), name)
		require.NoError(t, err)
		require.NoError(t, inner.Unlock(t.Context()))
		require.ErrorIs(t, inner.Err(), reentrant.ErrReleased)
		require.NoError(t, outer.Err(), "an inner unlock must not end the outer lease")
		require.NoError(t, outer.Unlock(t.Context()))
		<-outer.Done()
		require.ErrorIs(t, outer.Err(), reentrant.ErrReleased)
	})
}

func TestUnlockTwiceAndMoreUnlocksThanLocks(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, name := newClient(t, b.Client), testenv.Unique(t)
		outer, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		inner, err := c.Lock(outer.Context(), name)
		require.NoError(t, err)
		require.NoError(t, inner.Unlock(t.Context()))
		require.ErrorIs(t, inner.Unlock(t.Context()), reentrant.ErrNotHeld)
		st, _ := c.Inspect(t.Context(), name)
		require.EqualValues(t, 1, st.Depth, "a second Unlock of one lease must not decrement")
		require.NoError(t, outer.Unlock(t.Context()))
		require.ErrorIs(t, outer.Unlock(t.Context()), reentrant.ErrNotHeld)
		require.ErrorIs(t, inner.Unlock(t.Context()), reentrant.ErrNotHeld)
		require.ErrorIs(t, outer.Extend(t.Context(), time.Second), reentrant.ErrNotHeld)
	})
}

// An old lease must never release or extend a later ownership, even one by
// the same owner.
func TestStaleLeaseCannotTouchLaterOwnership(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := newClient(t, b.Client, reentrant.WithTTL(100*time.Millisecond), reentrant.WithoutRenewal())
		name := testenv.Unique(t)
		owner := reentrant.WithOwner(t.Context(), reentrant.NewOwner())

		old, err := c.Lock(owner, name)
		require.NoError(t, err)
		b.Expire(150 * time.Millisecond)
		require.ErrorIs(t, old.Extend(t.Context(), time.Second), reentrant.ErrNotHeld, "extend after expiry")

		// Same owner, new ownership.
		same, err := c.Lock(owner, name)
		require.NoError(t, err)
		require.Greater(t, same.Token(), old.Token())
		require.ErrorIs(t, old.Unlock(t.Context()), reentrant.ErrNotHeld)
		require.ErrorIs(t, old.Err(), reentrant.ErrLost)
		st, err := c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.True(t, st.Held, "the old lease released the new ownership")
		require.Equal(t, same.Token(), st.Token)
		require.NoError(t, same.Unlock(t.Context()))

		// Another owner, after expiry.
		first, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		b.Expire(150 * time.Millisecond)
		second, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		require.ErrorIs(t, first.Unlock(t.Context()), reentrant.ErrNotHeld)
		require.ErrorIs(t, first.Extend(t.Context(), time.Second), reentrant.ErrNotHeld)
		st, err = c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.Equal(t, string(second.Owner()), st.Owner)
		require.NoError(t, second.Unlock(t.Context()))
	})
}

func TestExtend(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := newClient(t, b.Client, reentrant.WithTTL(time.Second), reentrant.WithoutRenewal())
		name := testenv.Unique(t)
		l, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		require.NoError(t, l.Extend(t.Context(), time.Hour))
		assertShape(t, b.Client, name)
		st, err := c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.Greater(t, st.TTL, 59*time.Minute)
		require.NoError(t, l.Unlock(t.Context()))
	})
}

func TestNoScriptAfterFlush(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, name := newClient(t, b.Client), testenv.Unique(t)
		require.NoError(t, b.Client.ScriptFlush(t.Context()).Err())
		l, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		require.NoError(t, b.Client.ScriptFlush(t.Context()).Err())
		require.NoError(t, l.Extend(t.Context(), time.Minute))
		require.NoError(t, b.Client.ScriptFlush(t.Context()).Err())
		_, err = c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.NoError(t, b.Client.ScriptFlush(t.Context()).Err())
		require.NoError(t, l.Unlock(t.Context()))
	})
}

func TestDo(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, name := newClient(t, b.Client), testenv.Unique(t)
		boom := errors.New("boom")
		var seen fence.Token
		err := c.Do(t.Context(), name, func(ctx context.Context, tok fence.Token) error {
			seen = tok
			// The callback's context reenters.
			return c.Do(ctx, name, func(_ context.Context, inner fence.Token) error {
				require.Equal(t, tok, inner)
				return boom
			})
		})
		require.ErrorIs(t, err, boom)
		require.NotZero(t, seen)
		st, err := c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.False(t, st.Held, "Do must release even when fn fails")
	})
}

func TestCloseEndsLeases(t *testing.T) {
	_, rdb := testenv.Mini(t)
	c, err := reentrant.New(rdb)
	require.NoError(t, err)
	l, err := c.Lock(t.Context(), "x")
	require.NoError(t, err)
	require.NoError(t, c.Close())
	<-l.Done()
	require.ErrorIs(t, l.Err(), reentrant.ErrClosed)
	_, err = c.Lock(t.Context(), "y")
	require.ErrorIs(t, err, reentrant.ErrClosed)
	require.NoError(t, c.Close(), "Close is idempotent")
}

func TestConcurrentOwnersMutualExclusion(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, name := newClient(t, b.Client), testenv.Unique(t)
		const workers, rounds = 8, 25
		var (
			mu      sync.Mutex
			inside  int
			last    fence.Token
			entries int
		)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range rounds {
					l, err := c.Lock(t.Context(), name)
					if !assertNoErr(t, err) {
						return
					}
					mu.Lock()
					inside++
					if inside != 1 || l.Token() <= last {
						t.Errorf("inside=%d token=%d last=%d", inside, l.Token(), last)
					}
					last = l.Token()
					entries++
					mu.Unlock()
					// The critical section takes a moment outside the
					// mutex, so that a second holder would find inside
					// at 2 here or on its own entry.
					time.Sleep(200 * time.Microsecond)
					mu.Lock()
					if inside != 1 {
						t.Errorf("inside=%d while token %d held", inside, l.Token())
					}
					inside--
					mu.Unlock()
					assertNoErr(t, l.Unlock(t.Context()))
				}
			})
		}
		wg.Wait()
		require.Equal(t, workers*rounds, entries)
		require.EqualValues(t, workers*rounds, last, "one token per ownership, none skipped")
	})
}

func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}
