package reentrant_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

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
		_, err = c.ForceUnlock(ctx, name)
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

func TestForeignValueLeftUntouched(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, name := newClient(t, b.Client), testenv.Unique(t)
		k := lua.KeysFor(prefix, name)
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
