package reentrant_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/reentrant"
)

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
		require.EqualValues(t, 1, st.LastToken)
	})
}

// A nil fn is refused before anything is acquired.
func TestDoNilFn(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, name := newClient(t, b.Client), testenv.Unique(t)
		require.ErrorIs(t, c.Do(t.Context(), name, nil), reentrant.ErrInvalid)
		st, err := c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.Zero(t, st.LastToken, "nothing may have been acquired")
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
		outer, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		inner, err := c.Lock(outer.Context(), name)
		require.NoError(t, err)
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
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := newClient(t, b.Client, reentrant.WithTTL(renewalTTL))
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

// Inspect says whose the last ownership was and that it was released, names
// with glob characters included.
func TestInspectAttributesEndedOwnerships(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := newClient(t, b.Client)
		name := testenv.Unique(t) + "*?[x]\\{}"
		l, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		inner, err := c.Lock(l.Context(), name)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
		st, err := c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.Empty(t, st.Ended, "a partial release ends nothing")
		require.Equal(t, string(l.Owner()), st.LastOwner)
		require.NoError(t, inner.Unlock(t.Context()))
		_, err = c.TryLock(t.Context(), testenv.Unique(t)) // another name's lock is not listed
		require.NoError(t, err)
		st, err = c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.False(t, st.Held)
		require.Equal(t, []reentrant.Ended{{Owner: string(l.Owner()), Token: l.Token()}}, st.Ended)
		require.Equal(t, string(l.Owner()), st.LastOwner)
		require.Equal(t, l.Token(), st.LastToken)
	})
}
