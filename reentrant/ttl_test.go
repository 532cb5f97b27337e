package reentrant_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

// Lease.TTL answers from Redis, in one round trip, how long the lock stays
// held for the lease's ownership, without extending it; once the ownership
// is gone it says ErrNotHeld and ends the lease.
func TestLeaseTTL(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx := t.Context()
		c := newClient(t, b.Client, reentrant.WithTTL(10*time.Second), reentrant.WithoutRenewal())
		name := testenv.Unique(t)
		l, err := c.Lock(ctx, name)
		require.NoError(t, err)
		first, err := l.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, first, 9*time.Second)
		require.LessOrEqual(t, first, 10*time.Second)
		time.Sleep(50 * time.Millisecond)
		later, err := l.TTL(ctx)
		require.NoError(t, err)
		require.Less(t, later, first, "TTL must not extend the lock")

		inner, err := c.Lock(l.Context(), name)
		require.NoError(t, err)
		got, err := inner.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, got, 9*time.Second, "a level of the same ownership sees the same lease")
		require.NoError(t, inner.Unlock(ctx))
		_, err = inner.TTL(ctx)
		require.ErrorIs(t, err, reentrant.ErrNotHeld, "an unlocked level")

		// The lease runs out in Redis and another owner takes the lock.
		require.NoError(t, b.Client.HSet(ctx, lua.KeysFor(prefix, name).Lock, "x", "1").Err())
		other, err := newClient(t, b.Client).TryLock(ctx, name)
		require.NoError(t, err)
		_, err = l.TTL(ctx)
		require.ErrorIs(t, err, reentrant.ErrNotHeld)
		select {
		case <-l.Done():
		case <-time.After(time.Second):
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
