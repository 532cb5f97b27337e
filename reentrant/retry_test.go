package reentrant_test

import (
	"context"

	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/netfault"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/reentrant"
)

// go-redis re-sends a command whose reply did not arrive within ReadTimeout,
// on a new connection, although Redis already ran it (internal/netfault's
// tests show INCR applied twice that way). Every lock script must apply at
// most once per call: here each call's first reply is held past the read
// timeout, so go-redis retries it, and the state must be as if it ran once.
func TestGoRedisRetryDoesNotDoubleApply(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		p, err := netfault.New(b.Client.Options().Addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 150 * time.Millisecond, MaxRetries: 3})
		t.Cleanup(func() { _ = rdb.Close() })
		c := newClient(t, rdb)
		check := newClient(t, b.Client) // inspects without the proxy
		name := testenv.Unique(t)
		ctx := t.Context()
		depth := func() int64 {
			st, err := check.Inspect(ctx, name)
			require.NoError(t, err)
			return st.Depth
		}
		// Load the scripts so a held reply is the script's, not NOSCRIPT's.
		warm, err := c.TryLock(ctx, name+"-warm")
		require.NoError(t, err)
		require.NoError(t, warm.Unlock(ctx))

		delayed := func() {
			t.Helper()
			p.DelayNext(netfault.Downstream, 500*time.Millisecond)
		}
		before := p.Stats().Delayed[netfault.Downstream]

		delayed()
		outer, err := c.Lock(ctx, name)
		require.NoError(t, err)
		require.EqualValues(t, 1, outer.Token(), "a retried fresh acquire must not take a second token")
		require.EqualValues(t, 1, depth())

		delayed()
		inner, err := c.Lock(outer.Context(), name)
		require.NoError(t, err)
		require.EqualValues(t, 2, inner.Depth())
		require.EqualValues(t, 2, depth(), "a retried reentry must count once")

		delayed()
		require.NoError(t, inner.Unlock(ctx))
		require.EqualValues(t, 1, depth(), "a retried partial release must count once")

		delayed()
		require.NoError(t, outer.Unlock(ctx), "a retried full release must report success, not ErrNotHeld")
		require.EqualValues(t, 0, depth())

		require.EqualValues(t, before+4, p.Stats().Delayed[netfault.Downstream], "each call's reply was held once")
		require.Greater(t, p.Stats().Accepted, int64(4), "go-redis must have reconnected to retry")

		st, err := check.Inspect(ctx, name)
		require.NoError(t, err)
		require.EqualValues(t, 1, st.LastToken)
	})
}

// An acquire that fails without a reply (its context ended, or the read
// timed out) while the script ran must not leave the lock held by an owner
// that never got a lease: the applied request is undone.
func TestAcquireOfUnknownOutcomeIsUndone(t *testing.T) {
	for _, viaCtx := range []bool{true, false} {
		t.Run(map[bool]string{true: "context-deadline", false: "read-timeout"}[viaCtx], func(t *testing.T) {
			testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
				testUnknownAcquireUndone(t, b, viaCtx)
			})
		})
	}
}

func testUnknownAcquireUndone(t *testing.T, b testenv.Backend, viaCtx bool) {
	p, err := netfault.New(b.Client.Options().Addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	opts := &redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true}
	if !viaCtx {
		opts.ReadTimeout = 100 * time.Millisecond
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	check := newClient(t, b.Client)
	name := testenv.Unique(t)
	warm, err := c.TryLock(t.Context(), name+"-warm")
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(t.Context()))

	for _, reentry := range []bool{false, true} {
		ctx := t.Context()
		var outer *reentrant.Lease
		if reentry {
			outer, err = c.Lock(ctx, name)
			require.NoError(t, err)
			ctx = outer.Context()
		}
		p.DelayNext(netfault.Downstream, 400*time.Millisecond)
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		if viaCtx {
			lctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
		}
		_, err = c.Lock(lctx, name)
		cancel()
		require.Error(t, err)
		if viaCtx {
			require.ErrorIs(t, err, reentrant.ErrNotAcquired)
			require.ErrorIs(t, err, context.DeadlineExceeded)
		}
		// A caller whose context ended is not kept waiting for the undo: it
		// lands in the background once the held reply arrives.
		want := int64(0)
		if reentry {
			want = 1
		}
		var st reentrant.State
		require.Eventually(t, func() bool {
			st, err = check.Inspect(t.Context(), name)
			require.NoError(t, err)
			return st.Depth == want
		}, 5*time.Second, 10*time.Millisecond, "the applied acquire (reentry %v) must have been undone", reentry)
		require.NotZero(t, st.LastToken, "the script did run")
		if !reentry {
			continue
		}
		require.NoError(t, outer.Unlock(t.Context()))
	}
}
