package reentrant_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// A nil *Client, and a Client that New did not make, return ErrInvalid
// from every method instead of panicking.
func TestNilAndZeroClient(t *testing.T) {
	var zero reentrant.Client
	for _, c := range []*reentrant.Client{nil, &zero} {
		ctx := t.Context()
		for _, call := range []struct {
			want string // the error's start
			call func() error
		}{
			{`lock "n"`, func() error { _, err := c.Lock(ctx, "n"); return err }},
			{`trylock "n"`, func() error { _, err := c.TryLock(ctx, "n"); return err }},
			{`inspect "n"`, func() error { _, err := c.Inspect(ctx, "n"); return err }},
			{`force unlock "n"`, func() error { _, err := c.ForceUnlock(ctx, "n", fence.None); return err }},
			{`force unlock "n"`, func() error { return reentrant.ForceUnlockToken(c, ctx, "n", 1) }},
			{`lock "n"`, func() error { return c.Do(ctx, "n", func(context.Context, fence.Token) error { return nil }) }}, // Lock's error
			{`close`, c.Close},
		} {
			err := call.call()
			require.ErrorIs(t, err, reentrant.ErrInvalid, call.want)
			require.True(t, strings.HasPrefix(err.Error(), "reentrant: "+call.want+": invalid argument: "), err.Error())
		}
	}
}

// A nil *Lease's methods that return errors return ErrNotHeld.
func TestNilLease(t *testing.T) {
	var l *reentrant.Lease
	require.ErrorIs(t, l.Err(), reentrant.ErrNotHeld)
	require.ErrorIs(t, l.Extend(t.Context(), time.Second), reentrant.ErrNotHeld)
	_, err := l.TTL(t.Context())
	require.ErrorIs(t, err, reentrant.ErrNotHeld)
	require.ErrorIs(t, l.Unlock(t.Context()), reentrant.ErrNotHeld)
}

// ForceUnlockToken checks its context and name, and refuses after Close,
// as every other method does, before it sends anything.
func TestForceUnlockTokenChecksFirst(t *testing.T) {
	_, rdb := testenv.Mini(t)
	c, err := reentrant.New(rdb, reentrant.WithPrefix(prefix))
	require.NoError(t, err)
	var nilCtx context.Context
	require.ErrorIs(t, reentrant.ForceUnlockToken(c, nilCtx, "n", 1), reentrant.ErrInvalid)
	require.ErrorIs(t, reentrant.ForceUnlockToken(c, t.Context(), "", 1), reentrant.ErrInvalid)
	require.ErrorIs(t, reentrant.ForceUnlockToken(c, t.Context(), strings.Repeat("n", reentrant.MaxNameLen+1), 1), reentrant.ErrInvalid)
	require.NoError(t, c.Close())
	require.ErrorIs(t, reentrant.ForceUnlockToken(c, t.Context(), "n", 1), reentrant.ErrClosed)
}

// Lease.Err says which lock it is about, and stays the sentinel it was.
func TestLeaseErrIsAnOpError(t *testing.T) {
	_, rdb := testenv.Mini(t)
	c, err := reentrant.New(rdb, reentrant.WithPrefix(prefix))
	require.NoError(t, err)
	l, err := c.Lock(t.Context(), "released")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	require.ErrorIs(t, l.Err(), reentrant.ErrReleased)
	require.EqualError(t, l.Err(), `reentrant: lease "released": lease released`)

	l, err = c.Lock(t.Context(), "closed")
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.ErrorIs(t, l.Err(), reentrant.ErrLeaseClosed)
	require.EqualError(t, l.Err(), `reentrant: lease "closed": lease lost: client closed`)
	require.NoError(t, l.Unlock(t.Context()), "Unlock after Close releases the lock, as documented")
}

// A lease lost on its local deadline while Redis still holds the lock (the
// safety margin) is released by Unlock, which still says that it was
// lost: the caller's work outlived the lease. Do says so too, as its doc
// promises. A margin of nine tenths of the TTL forces the case: lost after
// half a second, the lock stays held in Redis 4.5 s more.
func TestUnlockOfALostLeaseSaysSo(t *testing.T) {
	_, rdb := testenv.Mini(t)
	c, err := reentrant.New(rdb, reentrant.WithPrefix(prefix), reentrant.WithTTL(5*time.Second),
		reentrant.WithSafetyMargin(4500*time.Millisecond), reentrant.WithoutRenewal())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx, name := t.Context(), testenv.Unique(t)

	l, err := c.Lock(ctx, name)
	require.NoError(t, err)
	<-l.Done()
	st, err := c.Inspect(ctx, name)
	require.NoError(t, err)
	require.True(t, st.Held, "the case under test: lost here, still held in Redis")
	err = l.Unlock(ctx)
	require.ErrorIs(t, err, reentrant.ErrNotHeld)
	require.ErrorIs(t, err, reentrant.ErrUnconfirmed)
	require.Contains(t, err.Error(), "lost before Unlock")
	require.Equal(t, 1, strings.Count(err.Error(), "reentrant: "), "one prefix: %v", err)
	st, err = c.Inspect(ctx, name)
	require.NoError(t, err)
	require.False(t, st.Held, "Unlock released the lock all the same")

	err = c.Do(ctx, name, func(ctx context.Context, _ fence.Token) error {
		<-ctx.Done()
		return nil
	})
	require.ErrorIs(t, err, reentrant.ErrNotHeld)
	require.ErrorIs(t, err, reentrant.ErrLost)
	st, err = c.Inspect(ctx, name)
	require.NoError(t, err)
	require.False(t, st.Held)
}

// An observer's NotAcquired event carries the error Lock returned.
func TestEventErrIsTheCallsError(t *testing.T) {
	_, rdb := testenv.Mini(t)
	var got error
	c, err := reentrant.New(rdb, reentrant.WithPrefix(prefix), reentrant.WithObserver(func(e reentrant.Event) {
		if e.Kind == reentrant.NotAcquired {
			got = e.Err
		}
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = c.Lock(t.Context(), "")
	require.Error(t, err)
	require.ErrorIs(t, got, reentrant.ErrInvalid)
	require.EqualError(t, got, err.Error())
}
