package reentrant_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
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

const prefix = "rftest"

// strictPrefix is the prefix of the tests' WithStrictTokens clients on a
// shared server: every client of a prefix must use one token mode (a strict
// client refuses a name whose slot has a time-token floor, and a time-token
// client a name with a strict counter: TestTokenModesOnOnePrefixRefused).
const strictPrefix = prefix + "-strict"

// strictOpts are the options of a WithStrictTokens client under strictPrefix.
var strictOpts = []reentrant.ClientOption{reentrant.WithStrictTokens(), reentrant.WithPrefix(strictPrefix)}

func newClient(t *testing.T, rdb redis.UniversalClient, opts ...reentrant.ClientOption) *reentrant.Client {
	t.Helper()
	c, err := reentrant.New(rdb, append([]reentrant.ClientOption{reentrant.WithPrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// nested locks name on c for a fresh owner and reenters it once: the
// outer lease and the inner one, at depth 2.
func nested(t *testing.T, c *reentrant.Client, name string) (outer, inner *reentrant.Lease) {
	t.Helper()
	outer, err := c.Lock(t.Context(), name)
	require.NoError(t, err)
	inner, err = c.Lock(outer.Context(), name)
	require.NoError(t, err)
	return outer, inner
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
// with the default options: the hold is a hash of the owner, the token and
// one field per level (no metadata here, no waiter), whose key's own
// expiry is the lease; the slot's floor lives, and expires; the name has
// no strict counter, no queue and no forced-unlock record.
func assertShape(t *testing.T, rdb redis.UniversalClient, name string) {
	t.Helper()
	k := scripts.KeysFor(prefix, name)
	st, err := scripts.Inspect(t.Context(), rdb, k)
	require.NoError(t, err)
	require.Greater(t, st.TTL, time.Duration(0), "the lease of %s must run", k.Lock)
	ttl := rdb.PTTL(t.Context(), k.Lock).Val()
	require.Greater(t, ttl, time.Duration(0), "the hold %s expires", k.Lock)
	require.LessOrEqual(t, ttl, st.TTL, "the hold %s expires when its lease ends, not later", k.Lock)
	fields := rdb.HGetAll(t.Context(), k.Lock).Val()
	require.Equal(t, st.Owner, fields["o"], "%s: %v", k.Lock, fields)
	require.Equal(t, st.Token.String(), fields["t"], "%s: %v", k.Lock, fields)
	require.Len(t, fields, 2+len(st.Levels), "%s: o, t and one field per level: %v", k.Lock, fields)
	for _, id := range st.Levels {
		require.Contains(t, fields, "l:"+id)
	}
	require.Greater(t, rdb.PTTL(t.Context(), k.Floor).Val(), time.Duration(0), "floor %s must live, and expire", k.Floor)
	require.GreaterOrEqual(t, st.Floor, st.Token, "floor %s is at least the token", k.Floor)
	for _, key := range []string{k.Counter, k.Queue, k.Forced} {
		require.Equal(t, time.Duration(-2), rdb.PTTL(t.Context(), key).Val(), "no key %s", key)
	}
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
		// The slot's floor: other tests' names of the slot may have raised it.
		require.GreaterOrEqual(t, st.LastToken, outer.Token())
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
		require.GreaterOrEqual(t, st.LastToken, next.Token(), "the slot's floor is at least the last token")
		st.LastToken = 0 // the slot's: other tests' names of the slot may have raised it
		require.Equal(t, reentrant.State{Name: name}, st, "a released name keeps nothing but its floor")
		k := scripts.KeysFor(prefix, name)
		require.Zero(t, b.Client.Exists(t.Context(), k.Lock, k.Queue, k.Counter, k.Forced).Val(), "no key of the name's own")
	})
}

func TestLeaseContextEndsOnUnlock(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, name := newClient(t, b.Client), testenv.Unique(t)
		outer, inner := nested(t, c, name)
		require.NoError(t, inner.Unlock(t.Context()))
		require.ErrorIs(t, inner.Err(), reentrant.ErrReleased)
		require.NoError(t, outer.Err(), "an inner unlock must not end the outer lease")
		require.NoError(t, outer.Unlock(t.Context()))
		<-outer.Done()
		require.ErrorIs(t, outer.Err(), reentrant.ErrReleased)
	})
}

// A lease's context is made the first time it is asked for: made before the
// lease ends, it ends with it; made after, it is born ended, with the same
// cause; either way it carries the owner and the Lock call's values, and
// its parent's cancellation does not reach it.
func TestLeaseContextWheneverAskedFor(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, name := newClient(t, b.Client), testenv.Unique(t)
		type key struct{}
		parent, cancel := context.WithCancel(context.WithValue(t.Context(), key{}, "v"))
		outer, err := c.Lock(parent, name)
		require.NoError(t, err)
		early := outer.Context()
		cancel()
		inner, err := c.Lock(early, name)
		require.NoError(t, err, "the context asked for early carries the owner")
		require.NoError(t, early.Err(), "the Lock call's cancellation does not end the lease")

		require.NoError(t, inner.Unlock(t.Context()))
		late := inner.Context()
		require.ErrorIs(t, context.Cause(late), reentrant.ErrReleased, "asked for after Unlock: born ended")
		require.Equal(t, "v", late.Value(key{}))
		owner, ok := reentrant.OwnerFrom(late)
		require.True(t, ok)
		require.Equal(t, outer.Owner(), owner)
		require.NoError(t, early.Err(), "the inner Unlock does not end the outer lease")

		require.NoError(t, c.Close())
		<-early.Done()
		require.ErrorIs(t, context.Cause(early), reentrant.ErrLeaseClosed, "made early, it ends with the ownership")
		require.ErrorIs(t, context.Cause(outer.Context()), reentrant.ErrLeaseClosed)
		require.ErrorIs(t, context.Cause(late), reentrant.ErrReleased, "an ended lease keeps its own cause")
	})
}

// An uncontended Lock+Unlock allocates a bounded number of objects: no
// context per lease, no goroutine per call, each script's arguments in one
// allocation (BenchmarkLockUnlock reports the count: 27 with go-redis
// v9.23, 11 of them go-redis's own, and 4 the pool statistics read before
// each call to tell one that sent nothing from one that may have run).
func TestLockUnlockAllocations(t *testing.T) {
	rdb := testenv.Redis(t)
	c, err := reentrant.New(rdb, reentrant.WithPrefix(prefix), reentrant.WithoutRenewal())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	name, ctx := testenv.Unique(t), t.Context()
	// AllocsPerRun counts every goroutine's allocations, and goroutines of
	// earlier tests may still be winding down (a background undo, a
	// closing client): they only add, so the least of three runs is the
	// pair's own count.
	least := math.Inf(1)
	for range 3 {
		least = min(least, testing.AllocsPerRun(200, func() {
			l, err := c.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}))
	}
	require.LessOrEqual(t, least, 27.0+raceAllocs, "allocations per Lock+Unlock")
}

func TestUnlockTwiceAndMoreUnlocksThanLocks(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, name := newClient(t, b.Client), testenv.Unique(t)
		outer, inner := nested(t, c, name)
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

		// Same owner, new ownership. The ownerships that must still hold
		// when checked get a minute: a loaded machine can take longer than
		// 100 ms between two steps.
		same, err := c.Lock(owner, name, reentrant.WithTTL(time.Minute))
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
		second, err := c.Lock(t.Context(), name, reentrant.WithTTL(time.Minute))
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
		require.Positive(t, last, "every ownership had a token above the one before")
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

// Lease.TTL answers from Redis, in one round trip, how long the lock stays
// held for the lease's ownership, without extending it; once the ownership
// is gone it says ErrNotHeld and ends the lease.
func TestLeaseTTL(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx := t.Context()
		// A minute: a loaded machine may take seconds between the calls
		// below, and the checks leave it ten.
		c := newClient(t, b.Client, reentrant.WithTTL(time.Minute), reentrant.WithoutRenewal())
		name := testenv.Unique(t)
		l, err := c.Lock(ctx, name)
		require.NoError(t, err)
		first, err := l.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, first, 50*time.Second)
		require.LessOrEqual(t, first, time.Minute)
		elapse(b, 50*time.Millisecond) // miniredis's clock too
		later, err := l.TTL(ctx)
		require.NoError(t, err)
		require.Less(t, later, first, "TTL must not extend the lock")

		inner, err := c.Lock(l.Context(), name)
		require.NoError(t, err)
		got, err := inner.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, got, 50*time.Second, "a level of the same ownership sees the same lease")
		require.NoError(t, inner.Unlock(ctx))
		_, err = inner.TTL(ctx)
		require.ErrorIs(t, err, reentrant.ErrNotHeld, "an unlocked level")

		// The hold goes from Redis (its lease run out, or an operator's
		// DEL) and another owner takes the lock.
		require.NoError(t, b.Client.Del(ctx, scripts.KeysFor(prefix, name).Lock).Err())
		other, err := newClient(t, b.Client).TryLock(ctx, name)
		require.NoError(t, err)
		_, err = l.TTL(ctx)
		require.ErrorIs(t, err, reentrant.ErrNotHeld)
		select {
		case <-l.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("the lease's context must end once TTL found the ownership gone")
		}
		require.ErrorIs(t, l.Err(), reentrant.ErrLost)
		require.NoError(t, other.Unlock(ctx))

		var nilCtx context.Context
		_, err = other.TTL(nilCtx)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		held, err := c.Lock(ctx, name)
		require.NoError(t, err)
		require.NoError(t, c.Close())
		_, err = held.TTL(ctx)
		require.ErrorIs(t, err, reentrant.ErrClosed)
	})
}

// A panicking fn must not leave the lock held and renewed until Close: Do
// releases it, then lets the panic go on.
func TestDoReleasesWhenFnPanics(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, name := newClient(t, b.Client), testenv.Unique(t)
		func() {
			defer func() {
				require.Equal(t, "boom", recover(), "the panic must continue past Do")
			}()
			_ = c.Do(t.Context(), name, func(context.Context, fence.Token) error { panic("boom") })
			t.Fatal("Do returned from a panicking fn")
		}()
		st, err := c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.False(t, st.Held, "the lock must be released when fn panics")
		require.Positive(t, st.LastToken, "the floor holds the ownership's token")
	})
}

// A nil fn is refused before anything is acquired.
func TestDoNilFn(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		// A prefix of its own: no other name raised the floor of its slot.
		c, name := newClient(t, b.Client, reentrant.WithPrefix(testenv.Unique(t))), testenv.Unique(t)
		require.ErrorIs(t, c.Do(t.Context(), name, nil), reentrant.ErrInvalid)
		st, err := c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.Equal(t, reentrant.State{Name: name}, st, "nothing may have been acquired")
	})
}

// Close is synchronous: when it returns every lease's context is done with
// ErrClosed, its goroutines are gone, and every method but Unlock refuses.
// Unlock still releases the lock, which would otherwise stay held until
// its TTL.
func TestCloseIsSynchronous(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		before := runtime.NumGoroutine()
		c, err := reentrant.New(b.Client, reentrant.WithPrefix(prefix))
		require.NoError(t, err)
		name := testenv.Unique(t)
		outer, inner := nested(t, c, name)
		other, err := c.Lock(t.Context(), name+"-2")
		require.NoError(t, err)

		require.NoError(t, c.Close())
		for _, l := range []*reentrant.Lease{outer, inner, other} {
			select {
			case <-l.Done():
			default:
				t.Fatal("a lease's context is still live after Close returned")
			}
			require.ErrorIs(t, l.Err(), reentrant.ErrClosed)
		}
		settle(t, before)

		_, err = c.Inspect(t.Context(), name)
		require.ErrorIs(t, err, reentrant.ErrClosed)
		require.ErrorIs(t, outer.Extend(t.Context(), time.Minute), reentrant.ErrClosed)
		_, err = c.TryLock(t.Context(), name)
		require.ErrorIs(t, err, reentrant.ErrClosed)
		require.ErrorIs(t, c.Do(t.Context(), name, func(context.Context, fence.Token) error { return nil }), reentrant.ErrClosed)
		require.NoError(t, c.Close(), "Close is idempotent")

		require.NoError(t, inner.Unlock(t.Context()))
		require.NoError(t, outer.Unlock(t.Context()))
		require.NoError(t, other.Unlock(t.Context()))
		check := newClient(t, b.Client)
		st, err := check.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.False(t, st.Held, "Unlock after Close releases the lock")
	})
}

// Owners are validated, and the client's bookkeeping keys (owner, name)
// pairs so that no two can collide: "a\x00b" on "c" and "a" on "b\x00c"
// once shared an entry, and one of the leases silently went unrenewed.
func TestOwnersValidatedAndKeptApart(t *testing.T) {
	t.Parallel() // see TestMain
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := newClient(t, b.Client, reentrant.WithTTL(renewalTTL), reentrant.WithRenewInterval(renewalEvery))
		for _, bad := range []reentrant.Owner{"", "a\x00b", "tab\there", "\xff\xfe", reentrant.Owner(make([]byte, reentrant.MaxOwnerLen+1))} {
			_, err := c.TryLock(reentrant.WithOwner(t.Context(), bad), testenv.Unique(t))
			require.ErrorIs(t, err, reentrant.ErrInvalid, "owner %q", bad)
			require.ErrorIs(t, reentrant.CheckOwner(bad), reentrant.ErrInvalid)
		}
		// The pair that once shared one bookkeeping entry ("a\x00b" on N and
		// "a" on "b\x00"+N both joined to "a\x00b\x00"+N): the first owner is
		// now refused, and the second is renewed like any other.
		base := testenv.Unique(t)
		_, err := c.Lock(reentrant.WithOwner(t.Context(), "a\x00b"), base)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		a, err := c.Lock(reentrant.WithOwner(t.Context(), "a"), "b\x00"+base)
		require.NoError(t, err)
		other, err := c.Lock(reentrant.WithOwner(t.Context(), "a b"), base)
		require.NoError(t, err)
		// Both are renewed past their TTL (one entry each, none lost).
		waitRenewed(t, a, renewalTTL)
		waitRenewed(t, other, renewalTTL)
		require.NoError(t, a.Unlock(t.Context()))
		require.NoError(t, other.Unlock(t.Context()))
	})
}

// Nil arguments are ErrInvalid, never a panic later.
func TestNilArguments(t *testing.T) {
	var typedNil *redis.Client
	_, err := reentrant.New(typedNil)
	require.ErrorIs(t, err, reentrant.ErrInvalid)
	var typedNilCluster *redis.ClusterClient
	_, err = reentrant.New(typedNilCluster)
	require.ErrorIs(t, err, reentrant.ErrInvalid)

	_, rdb := testenv.Mini(t)
	_, err = reentrant.New(rdb, nil)
	require.ErrorIs(t, err, reentrant.ErrInvalid)

	c := newClient(t, rdb)
	var nilCtx context.Context
	_, err = c.Lock(nilCtx, "n")
	require.ErrorIs(t, err, reentrant.ErrInvalid)
	_, err = c.TryLock(nilCtx, "n")
	require.ErrorIs(t, err, reentrant.ErrInvalid)
	_, err = c.Inspect(nilCtx, "n")
	require.ErrorIs(t, err, reentrant.ErrInvalid)
	require.ErrorIs(t, c.Do(nilCtx, "n", func(context.Context, fence.Token) error { return nil }), reentrant.ErrInvalid)
	l, err := c.Lock(t.Context(), "n")
	require.NoError(t, err)
	require.ErrorIs(t, l.Extend(nilCtx, time.Second), reentrant.ErrInvalid)
	require.ErrorIs(t, l.Unlock(nilCtx), reentrant.ErrInvalid)
	require.NoError(t, l.Unlock(t.Context()))
}

// Inspect of a lock held at depth 2, then 1, then released, names with
// glob characters included: the holder's state while held; once released,
// nothing but LastToken (no owner, token, levels or lease), and another
// name's lock does not show.
func TestInspectHeldThenReleased(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := newClient(t, b.Client)
		name := testenv.Unique(t) + "*?[x]\\{}"
		l, err := c.Lock(t.Context(), name, reentrant.WithMetadata("job"))
		require.NoError(t, err)
		inner, err := c.Lock(l.Context(), name)
		require.NoError(t, err)
		st, err := c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{l.ID(), inner.ID()}, st.Levels)
		require.NoError(t, l.Unlock(t.Context()))
		st, err = c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.True(t, st.Held, "a partial release ends nothing")
		require.Equal(t, string(l.Owner()), st.Owner)
		require.Equal(t, l.Token(), st.Token)
		require.EqualValues(t, 1, st.Depth)
		require.Equal(t, []string{inner.ID()}, st.Levels, "the outer level went, the inner one stays")
		require.Equal(t, "job", st.Meta)
		require.Positive(t, st.TTL)
		require.GreaterOrEqual(t, st.LastToken, l.Token())
		require.NoError(t, inner.Unlock(t.Context()))
		other, err := c.TryLock(t.Context(), testenv.Unique(t)) // another name's lock is not shown
		require.NoError(t, err)
		st, err = c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.GreaterOrEqual(t, st.LastToken, l.Token(), "the floor of the name's slot")
		st.LastToken = 0
		require.Equal(t, reentrant.State{Name: name}, st)
		require.NoError(t, other.Unlock(t.Context()))
	})
}

// The types Inspect hands out are this package's own, so that go doc shows
// their fields here, not behind an alias of an internal package.
func TestInspectTypesAreOwn(t *testing.T) {
	for _, v := range []any{reentrant.State{}, reentrant.Forced{}} {
		typ := reflect.TypeOf(v)
		require.Equal(t, "github.com/redfence/redfence/reentrant", typ.PkgPath(), "%v is an alias of another package's type", typ)
	}
	typ := reflect.TypeOf(reentrant.State{})
	for _, f := range []string{"Forced"} {
		ft, ok := typ.FieldByName(f)
		require.True(t, ok, f)
		for ft.Type.Kind() == reflect.Slice || ft.Type.Kind() == reflect.Pointer {
			ft.Type = ft.Type.Elem()
		}
		require.Equal(t, "github.com/redfence/redfence/reentrant", ft.Type.PkgPath(), "State.%s", f)
	}
}

func TestBadInput(t *testing.T) {
	_, err := reentrant.New(nil)
	require.ErrorIs(t, err, reentrant.ErrInvalid)

	_, rdb := testenv.Mini(t)
	for _, opt := range []reentrant.ClientOption{
		nil,
		reentrant.WithTTL(0), reentrant.WithTTL(-time.Second), reentrant.WithTTL(time.Microsecond),
		reentrant.WithTTL(reentrant.MaxTTL + time.Millisecond), reentrant.WithTTL(1500 * time.Microsecond),
		reentrant.WithPrefix(""), reentrant.WithPrefix("a{b"), reentrant.WithPrefix("a}"), reentrant.WithPrefix(strings.Repeat("p", 257)),
		reentrant.WithRenewInterval(0), reentrant.WithRenewInterval(-1),
		reentrant.WithRenewInterval(reentrant.DefaultTTL), // not shorter than the TTL
		reentrant.WithRetryJitter(-1), reentrant.WithRetryJitter(2 * time.Minute),
		reentrant.WithMaxRetryDelay(0), reentrant.WithMaxRetryDelay(2 * time.Hour),
	} {
		c, err := reentrant.New(rdb, opt)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		require.Nil(t, c)
	}

	c := newClient(t, rdb)
	ctx := t.Context()
	for _, name := range []string{"", strings.Repeat("n", reentrant.MaxNameLen+1)} {
		_, err = c.Lock(ctx, name)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		_, err = c.TryLock(ctx, name)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		_, err = c.Inspect(ctx, name)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		_, err = c.ForceUnlock(ctx, name, fence.None)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		require.ErrorIs(t, reentrant.CheckName(name), reentrant.ErrInvalid, "CheckName says what the calls say")
	}
	for _, p := range []string{"", "a{b", strings.Repeat("p", reentrant.MaxPrefixLen+1)} {
		require.ErrorIs(t, reentrant.CheckPrefix(p), reentrant.ErrInvalid, "CheckPrefix(%q)", p)
	}
	_, err = c.TryLock(ctx, strings.Repeat("n", reentrant.MaxNameLen))
	require.NoError(t, err, "a name of exactly the maximum length is valid")

	_, err = c.Lock(reentrant.WithOwner(ctx, ""), "x")
	require.ErrorIs(t, err, reentrant.ErrInvalid)
	_, err = c.Lock(reentrant.WithOwner(ctx, reentrant.Owner(strings.Repeat("o", reentrant.MaxOwnerLen+1))), "x")
	require.ErrorIs(t, err, reentrant.ErrInvalid)

	l, err := c.Lock(ctx, "ttl")
	require.NoError(t, err)
	for _, d := range []time.Duration{0, -1, time.Microsecond, reentrant.MaxTTL + time.Millisecond, 1500 * time.Microsecond} {
		require.ErrorIs(t, l.Extend(ctx, d), reentrant.ErrInvalid, "Extend(%v)", d)
	}

	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = c.Lock(done, "y")
	require.ErrorIs(t, err, reentrant.ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	_, err = c.TryLock(done, "y")
	require.ErrorIs(t, err, reentrant.ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	var nilLease *reentrant.Lease
	require.ErrorIs(t, nilLease.Unlock(ctx), reentrant.ErrNotHeld)
}

// Every error starts with the package's prefix, the constructors' and the
// Check functions' too, and quotes a long name cut to 128 bytes and its
// length; errors.Is still finds the sentinels.
func TestErrorsPrefixedAndNamesCut(t *testing.T) {
	_, err := reentrant.New(nil)
	require.ErrorIs(t, err, reentrant.ErrInvalid)
	require.EqualError(t, err, "reentrant: new: invalid argument: nil Redis client")
	_, rdb := testenv.Mini(t)
	for _, opt := range []reentrant.ClientOption{nil, reentrant.WithTTL(0), reentrant.WithPrefix("a{b"), reentrant.WithIdentity("")} {
		_, err := reentrant.New(rdb, opt)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		require.True(t, strings.HasPrefix(err.Error(), "reentrant: new: invalid argument: "), err.Error())
	}
	_, err = reentrant.NewRedlock([]redis.UniversalClient{rdb})
	require.ErrorIs(t, err, reentrant.ErrInvalid)
	require.EqualError(t, err, "reentrant: new redlock: invalid argument: Redlock needs an odd number of nodes, at least 3, not 1")
	for _, err := range []error{reentrant.CheckName(""), reentrant.CheckPrefix("a{b"), reentrant.CheckOwner("")} {
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		require.True(t, strings.HasPrefix(err.Error(), "reentrant: invalid argument: "), err.Error())
	}

	c := newClient(t, rdb)
	long := strings.Repeat("n", reentrant.MaxNameLen+1)
	_, err = c.Lock(t.Context(), long)
	require.ErrorIs(t, err, reentrant.ErrInvalid)
	require.EqualError(t, err, `reentrant: lock "`+long[:128]+`"…(1025 bytes): invalid argument: lock name is 1025 bytes, the maximum is 1024`)
	var op *reentrant.OpError
	require.ErrorAs(t, err, &op)
	require.Equal(t, long, op.Name, "OpError.Name keeps the whole name")

	// A cut does not split a character: "é" (2 bytes) at bytes 127-128
	// is left out whole.
	held, err := c.Lock(t.Context(), strings.Repeat("n", 127)+"é"+strings.Repeat("n", 100))
	require.NoError(t, err)
	_, err = c.TryLock(t.Context(), held.Name())
	require.ErrorIs(t, err, reentrant.ErrNotAcquired)
	require.True(t, strings.HasPrefix(err.Error(), `reentrant: trylock "`+strings.Repeat("n", 127)+`"…(229 bytes): not acquired`), err.Error())
	require.NoError(t, held.Unlock(t.Context()))
}

func TestForeignValueLeftUntouched(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, name := newClient(t, b.Client), testenv.Unique(t)
		k := scripts.KeysFor(prefix, name)
		require.NoError(t, b.Client.RPush(t.Context(), k.Lock, "mine").Err())
		for _, f := range []func() error{
			func() error { _, err := c.TryLock(t.Context(), name); return err },
			func() error { _, err := c.Lock(t.Context(), name); return err },
			func() error { _, err := c.Inspect(t.Context(), name); return err },
		} {
			err := f()
			require.ErrorIs(t, err, reentrant.ErrForeign)
			require.ErrorContains(t, err, k.Lock)
		}
		require.Equal(t, []string{"mine"}, b.Client.LRange(t.Context(), k.Lock, 0, -1).Val())
	})
}

// The uncontended path is one round trip to take a lock and one to release
// it, with a reentry and its release one each as well: no policy check,
// script load or subscription once the client is warm. Counted with a hook
// (every command or pipeline the client sends), on miniredis and on Redis,
// in both token modes.
func TestUncontendedRoundTrips(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		for _, mode := range []struct {
			name string
			opts []reentrant.ClientOption
		}{{"counter", strictOpts}, {"time", nil}} {
			t.Run(mode.name, func(t *testing.T) {
				rdb := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
				t.Cleanup(func() { _ = rdb.Close() })
				var mu sync.Mutex
				var trips []string
				rdb.AddHook(testenv.Hook{Sent: func(cmds []redis.Cmder, _ bool) {
					names := make([]string, len(cmds))
					for i, c := range cmds {
						names[i] = c.Name()
						if testenv.ScriptCall(names[i]) {
							names[i] = "script" // FCALL, or EVALSHA without Functions
						}
					}
					mu.Lock()
					trips = append(trips, strings.Join(names, " "))
					mu.Unlock()
				}})
				take := func() []string {
					mu.Lock()
					defer mu.Unlock()
					out := trips
					trips = nil
					return out
				}
				c := newClient(t, rdb, mode.opts...) // default options: renewal on, a 30 s TTL
				ctx, name := t.Context(), testenv.Unique(t)
				warm, err := c.TryLock(ctx, name+"-warm") // the policy check, the scripts' load
				require.NoError(t, err)
				require.NoError(t, warm.Unlock(ctx))
				take()

				for _, lock := range []func() (*reentrant.Lease, error){
					func() (*reentrant.Lease, error) { return c.Lock(ctx, name) },
					func() (*reentrant.Lease, error) { return c.TryLock(ctx, name) },
				} {
					l, err := lock()
					require.NoError(t, err)
					require.Equal(t, []string{"script"}, take(), "a fresh acquisition")
					in, err := c.Lock(l.Context(), name)
					require.NoError(t, err)
					require.Equal(t, []string{"script"}, take(), "a reentry")
					require.NoError(t, in.Unlock(ctx))
					require.Equal(t, []string{"script"}, take(), "the reentry's release")
					require.NoError(t, l.Unlock(ctx))
					require.Equal(t, []string{"script"}, take(), "the release")
				}
			})
		}
	})
}

// A Redis call runs on the caller's goroutine unless a local timer must
// bound it: with go-redis's defaults and a context with a deadline it runs
// on a goroutine of its own; with no deadline, or on a client with
// ContextTimeoutEnabled, inline. A hook notes the goroutine each script
// call is sent from.
func TestCallsRunInlineUnlessATimerMustBoundThem(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		for _, c := range []struct {
			name      string
			enforce   bool // ContextTimeoutEnabled
			deadline  bool
			wantOwnGo bool
		}{
			{"defaults, deadline", false, true, true},
			{"defaults, no deadline", false, false, false},
			{"ContextTimeoutEnabled, deadline", true, true, false},
		} {
			t.Run(c.name, func(t *testing.T) {
				rdb := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr, ContextTimeoutEnabled: c.enforce})
				t.Cleanup(func() { _ = rdb.Close() })
				var mu sync.Mutex
				var from []uint64
				rdb.AddHook(testenv.Hook{Sent: func(cmds []redis.Cmder, _ bool) {
					if testenv.ScriptCall(cmds[0].Name()) {
						mu.Lock()
						from = append(from, testenv.GoroutineID())
						mu.Unlock()
					}
				}})
				lc := newClient(t, rdb)
				warm, err := lc.TryLock(t.Context(), testenv.Unique(t)+"-warm") // policy check, script load
				require.NoError(t, err)
				require.NoError(t, warm.Unlock(t.Context()))
				mu.Lock()
				from = nil
				mu.Unlock()

				ctx := t.Context() // cancellable, no deadline
				if c.deadline {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, time.Minute)
					defer cancel()
				}
				l, err := lc.Lock(ctx, testenv.Unique(t))
				require.NoError(t, err)
				require.NoError(t, l.Unlock(ctx))
				me := testenv.GoroutineID()
				mu.Lock()
				defer mu.Unlock()
				require.Len(t, from, 2, "one acquire, one release")
				for _, g := range from {
					require.Equal(t, c.wantOwnGo, g != me, "sent from goroutine %d, the caller is %d", g, me)
				}
			})
		}
	})
}

// Concurrent Lock and Unlock calls share round trips on a client with
// go-redis's defaults: past two in flight, a call waits and goes out in a
// pipeline with the others that waited (scripts.Batched), and each still
// gets its own answer: every name's tokens run 1, 2, 3, …. On a client
// with ContextTimeoutEnabled every call is its own round trip, inline.
func TestConcurrentCallsShareRoundTrips(t *testing.T) {
	t.Parallel() // see TestMain
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		for _, enforce := range []bool{false, true} {
			t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", enforce), func(t *testing.T) {
				rdb := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr, ContextTimeoutEnabled: enforce})
				t.Cleanup(func() { _ = rdb.Close() })
				var pipes atomic.Int64
				rdb.AddHook(testenv.Hook{Sent: func(cmds []redis.Cmder, pipe bool) {
					if pipe && testenv.ScriptCall(cmds[0].Name()) {
						pipes.Add(1)
					}
				}})
				lc := newClient(t, rdb)
				base := testenv.Unique(t)
				var wg sync.WaitGroup
				errs := make(chan error, 16)
				for g := range 16 {
					wg.Go(func() {
						name := fmt.Sprintf("%s-%d", base, g)
						var last fence.Token
						for range 25 {
							l, err := lc.Lock(t.Context(), name)
							if err == nil && l.Token() <= last {
								err = fmt.Errorf("%s: token %d after %d", name, l.Token(), last)
							}
							if err == nil {
								last = l.Token()
							}
							if err == nil {
								err = l.Unlock(t.Context())
							}
							if err != nil {
								errs <- err
								return
							}
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
				if enforce {
					require.Zero(t, pipes.Load(), "a client that enforces contexts batched")
				} else {
					require.Positive(t, pipes.Load(), "16 callers and no call went out in a pipeline")
				}
			})
		}
	})
}

// A lease's context carries its lock's name and token, beside those of the
// leases it was taken within, for code that sends them on (fencehttp).
func TestLeaseContextCarriesTokens(t *testing.T) {
	_, rdb := testenv.Mini(t)
	c := newClient(t, rdb)
	a, err := c.Lock(t.Context(), "a")
	require.NoError(t, err)
	b, err := c.Lock(a.Context(), "b")
	require.NoError(t, err)
	got, ok := fence.FromContext(b.Context())
	require.True(t, ok)
	require.Equal(t, map[string]fence.Token{"a": a.Token(), "b": b.Token()}, got)
	again, err := c.Lock(b.Context(), "a")
	require.NoError(t, err)
	tok, _ := fence.TokenFor(again.Context(), "a")
	require.Equal(t, a.Token(), tok, "a reentry's token is the ownership's")
}
