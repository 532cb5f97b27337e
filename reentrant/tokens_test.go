//go:build unix

package reentrant_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage/memory"
)

// issue takes and releases name n times on c and returns the highest token
// it got.
func issue(t *testing.T, c *reentrant.Client, name string, n int) fence.Token {
	t.Helper()
	var top fence.Token
	for range n {
		l, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		require.Greater(t, l.Token(), top)
		top = l.Token()
		require.NoError(t, l.Unlock(t.Context()))
	}
	return top
}

// firstAfter is the token of the first acquisition of name on c.
func firstAfter(t *testing.T, c *reentrant.Client, name string) fence.Token {
	t.Helper()
	l, err := c.Lock(t.Context(), name)
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Unlock(t.Context())) }()
	return l.Token()
}

// The events that lose the counter. In time mode the first token after each
// is above every token before it; the strict counter starts again at 1.
func TestTimeTokensSurviveALostCounter(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []reentrant.ClientOption
	}{{"counter", nil}, {"time", []reentrant.ClientOption{reentrant.WithTimeTokens()}}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Run("flushall", func(t *testing.T) {
				srv := redisproc.Start(t)
				c, name := newClient(t, srv.Client(), mode.opts...), testenv.Unique(t)
				before := issue(t, c, name, 5)
				require.NoError(t, srv.Client().FlushAll(t.Context()).Err())
				checkAfterLoss(t, mode.name, before, firstAfter(t, c, name))
			})
			t.Run("restart-without-persistence", func(t *testing.T) {
				srv := redisproc.Start(t) // no AOF, no RDB
				c, name := newClient(t, srv.Client(), mode.opts...), testenv.Unique(t)
				before := issue(t, c, name, 5)
				srv.Crash(0)
				checkAfterLoss(t, mode.name, before, firstAfter(t, c, name))
			})
			t.Run("failover", func(t *testing.T) {
				primary, replica := primaryWithReplica(t)
				c, name := newClient(t, primary.Client(), mode.opts...), testenv.Unique(t)
				issue(t, c, name, 2)
				replica.WaitSync(t.Context())
				replica.Isolate()
				// Tokens the replica never sees.
				before := issue(t, c, name, 5)
				primary.Kill()
				replica.Resume()
				replica.Promote()
				got, err := lua.Inspect(t.Context(), replica.Client(), lua.KeysFor(prefix, name))
				require.NoError(t, err)
				require.Less(t, got.LastToken, before, "the promoted replica must have missed tokens")
				after := newClient(t, replica.Client(), mode.opts...)
				checkAfterLoss(t, mode.name, before, firstAfter(t, after, name))
			})
		})
	}
}

func checkAfterLoss(t *testing.T, mode string, before, after fence.Token) {
	t.Helper()
	if mode == "time" {
		require.Greater(t, after, before, "the first time token after the counter was lost must be above every earlier one")
		return
	}
	require.LessOrEqual(t, after, before, "the strict counter, lost, repeats tokens (the contrast)")
}

// In time mode the counter expires the idle time after the release; in the
// strict mode it never expires.
func TestCounterIdleExpiry(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		for _, c := range []struct {
			opts   []reentrant.ClientOption
			lo, hi time.Duration
			desc   string
		}{
			{nil, -1, -1, "never"},
			{[]reentrant.ClientOption{reentrant.WithTimeTokens()}, reentrant.DefaultCounterIdleExpiry - time.Minute, reentrant.DefaultCounterIdleExpiry, "7 days"},
			{[]reentrant.ClientOption{reentrant.WithTimeTokens(), reentrant.WithCounterIdleExpiry(2 * time.Hour)}, 2*time.Hour - time.Minute, 2 * time.Hour, "2 h"},
		} {
			lc, name := newClient(t, b.Client, c.opts...), testenv.Unique(t)
			l, err := lc.Lock(t.Context(), name)
			require.NoError(t, err)
			require.NoError(t, l.Unlock(t.Context()))
			ttl := b.Client.PTTL(t.Context(), lua.KeysFor(prefix, name).Counter).Val()
			require.GreaterOrEqual(t, ttl, c.lo, c.desc)
			require.LessOrEqual(t, ttl, c.hi, c.desc)
			st, err := lc.Inspect(t.Context(), name)
			require.NoError(t, err)
			require.Equal(t, l.Token(), st.LastToken)
		}
		// The idle expiry is at least an hour (MinCounterIdleExpiry): only
		// miniredis's clock can pass it in a test.
		if b.Mini == nil {
			return
		}
		// Idle past the expiry: the counter is gone, and the name costs no
		// key at all; the next token is still above the last.
		lc, name := newClient(t, b.Client, reentrant.WithTimeTokens(), reentrant.WithCounterIdleExpiry(time.Hour)), testenv.Unique(t)
		last := issue(t, lc, name, 1)
		testenv.Advance(b.Mini, time.Hour+time.Millisecond)
		k := lua.KeysFor(prefix, name)
		require.Zero(t, b.Client.Exists(t.Context(), k.Lock, k.Queue, k.Counter).Val())
		require.Greater(t, issue(t, lc, name, 1), last)
	})
}

func TestTimeTokenOptionsBadInput(t *testing.T) {
	_, rdb := testenv.Mini(t)
	for _, opts := range [][]reentrant.ClientOption{
		{reentrant.WithCounterIdleExpiry(24 * time.Hour)}, // the strict counter never expires
		{reentrant.WithTimeTokens(), reentrant.WithCounterIdleExpiry(reentrant.MinCounterIdleExpiry - time.Millisecond)},
		{reentrant.WithTimeTokens(), reentrant.WithCounterIdleExpiry(reentrant.MaxCounterIdleExpiry + time.Millisecond)},
		{reentrant.WithTimeTokens(), reentrant.WithCounterIdleExpiry(time.Hour + time.Microsecond)},
		{reentrant.WithTimeTokens(), reentrant.WithCounterIdleExpiry(2 * time.Hour), reentrant.WithTTL(3 * time.Hour)},
	} {
		_, err := reentrant.New(rdb, opts...)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
	}
	for _, opts := range [][]reentrant.ClientOption{
		{reentrant.WithTimeTokens()},
		{reentrant.WithTimeTokens(), reentrant.WithCounterIdleExpiry(reentrant.MinCounterIdleExpiry)},
		{reentrant.WithTimeTokens(), reentrant.WithCounterIdleExpiry(reentrant.MaxCounterIdleExpiry)},
	} {
		c, err := reentrant.New(rdb, opts...)
		require.NoError(t, err)
		require.NoError(t, c.Close())
	}
}

// Clients of both modes may share a name: each issues a token above the
// counter, so tokens keep increasing whichever client takes the lock.
func TestTokenModesShareAName(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		strict, timed := newClient(t, b.Client), newClient(t, b.Client, reentrant.WithTimeTokens())
		name := testenv.Unique(t)
		var last fence.Token
		for _, c := range []*reentrant.Client{strict, timed, strict, timed, strict} {
			tok := issue(t, c, name, 2)
			require.Greater(t, tok, last)
			last = tok
		}
	})
}

// operatorLease is the lease of the operator tests: renewed every 200 ms,
// so a deleted or forced ownership is found gone within about that, with a
// TTL no loaded scheduler outlasts, so that only that renewal can end it
// (a 1.5 s lease once left a late renewal 850 ms before its local timer
// would end it as unconfirmed instead).
var operatorLease = []reentrant.ClientOption{reentrant.WithTTL(time.Minute), reentrant.WithRenewInterval(200 * time.Millisecond)}

// awaitLoss waits for l to end, with a ceiling of many renewal intervals
// (a loaded machine delays the renewer, never the promise), and returns why.
func awaitLoss(t *testing.T, l *reentrant.Lease) error {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("lease %d never learned that its ownership is gone", l.Token())
	}
	return l.Err()
}

// deletedByHand is what people do to a stuck Redis lock: DEL its keys
// (here the hash and the queue; never the counter, which a DEL of "the
// lock" does not name). Tokens must not repeat: the next holder gets a
// higher one, a fenced store refuses the first holder's late write, and the
// first holder's lease ends with ErrGone at its next renewal.
func deletedByHand(t *testing.T, rdb redis.UniversalClient) {
	ctx, name := t.Context(), testenv.Unique(t)
	a := newClient(t, rdb, operatorLease...)
	b := newClient(t, rdb, operatorLease...)
	store := memory.New()
	first, err := a.Lock(ctx, name)
	require.NoError(t, err)
	require.NoError(t, store.Put(ctx, "resource", []byte("a1"), first.Token()))

	k := lua.KeysFor(prefix, name)
	require.NoError(t, rdb.Del(ctx, k.Lock, k.Queue).Err())

	second, err := b.TryLock(ctx, name)
	require.NoError(t, err, "the deleted lock is free")
	require.Greater(t, second.Token(), first.Token(), "a DEL of the lock must not make its token repeat")
	require.NoError(t, store.Put(ctx, "resource", []byte("b"), second.Token()))
	require.ErrorIs(t, store.Put(ctx, "resource", []byte("a2"), first.Token()), fence.ErrStale,
		"the first holder's late write is refused")

	err = awaitLoss(t, first)
	require.ErrorIs(t, err, reentrant.ErrGone)
	require.ErrorIs(t, err, reentrant.ErrLost)
	require.False(t, errors.Is(err, reentrant.ErrUnconfirmed))
	require.ErrorIs(t, first.Unlock(ctx), reentrant.ErrNotHeld, "its Unlock says it did not hold the lock")
	require.NoError(t, second.Err(), "the second holder keeps its lease")
	require.NoError(t, second.Unlock(ctx))
	rec, err := store.Get(ctx, "resource")
	require.NoError(t, err)
	require.Equal(t, "b", string(rec.Value))
	require.Equal(t, second.Token(), rec.Token)
}

func TestDeletedLockDoesNotRepeatTokens(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) { deletedByHand(t, b.Client) })
}

func TestDeletedLockDoesNotRepeatTokensOnCluster(t *testing.T) {
	t.Parallel() // see TestMain
	eachScriptPath(t, func(t *testing.T, p scriptPath) {
		deletedByHand(t, redisproc.StartCluster(t, redisproc.ClusterConfig{Masters: 3, Args: p.args}).Client())
	})
}

func TestDeletedLockDoesNotRepeatTokensOnSentinel(t *testing.T) {
	t.Parallel() // see TestMain
	eachScriptPath(t, func(t *testing.T, p scriptPath) {
		g := redisproc.StartSentinels(t, 1, 3, redisproc.WithArgs(p.args...))
		rdb := g.Client()
		t.Cleanup(func() { _ = rdb.Close() })
		deletedByHand(t, rdb)
	})
}

// ForceUnlock with a waiter queued: the waiter gets the lock with a higher
// token, the forced holder's lease ends with ErrGone, and Inspect shows who
// forced which token.
func TestForceUnlockHandsToTheWaiter(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, name := t.Context(), testenv.Unique(t)
		holder := newClient(t, b.Client, operatorLease...)
		waiter := newClient(t, b.Client, operatorLease...)
		ops := newClient(t, b.Client, reentrant.WithIdentity("ops@bastion"))
		store := memory.New()

		first, err := holder.Lock(ctx, name, reentrant.WithMetadata("stuck job"))
		require.NoError(t, err)
		got := make(chan *reentrant.Lease, 1)
		go func() {
			l, err := waiter.Lock(ctx, name)
			if err != nil {
				t.Errorf("the waiter: %v", err)
			}
			got <- l
		}()
		require.Eventually(t, func() bool {
			st, err := ops.Inspect(ctx, name)
			return err == nil && st.Waiters == 1
		}, 20*time.Second, 10*time.Millisecond, "the waiter never queued")

		forced, err := ops.ForceUnlock(ctx, name)
		require.NoError(t, err)
		require.Equal(t, first.Token(), forced)

		var second *reentrant.Lease
		select {
		case second = <-got:
		case <-time.After(20 * time.Second):
			t.Fatal("the waiter never got the forced lock")
		}
		require.NotNil(t, second)
		require.Greater(t, second.Token(), first.Token())
		require.NoError(t, store.Put(ctx, "r", []byte("waiter"), second.Token()))
		require.ErrorIs(t, store.Put(ctx, "r", []byte("forced"), first.Token()), fence.ErrStale)

		err = awaitLoss(t, first)
		require.ErrorIs(t, err, reentrant.ErrGone)

		st, err := ops.Inspect(ctx, name)
		require.NoError(t, err)
		require.Equal(t, second.Token(), st.Token)
		require.NotNil(t, st.Forced)
		require.Equal(t, first.Token(), st.Forced.Token)
		require.Equal(t, "ops@bastion", st.Forced.By)
		require.Contains(t, st.Ended, reentrant.Ended{Token: first.Token(), Owner: string(first.Owner()), Expired: true, Forced: true})

		// A repeat, by token, changes nothing and succeeds; the current
		// holder is untouched.
		require.NoError(t, ops.ForceUnlockToken(ctx, name, first.Token()))
		require.NoError(t, second.Err())
		// The holder's own token: ended; then the lock is free.
		require.NoError(t, ops.ForceUnlockToken(ctx, name, second.Token()))
		_, err = ops.ForceUnlock(ctx, name)
		require.ErrorIs(t, err, reentrant.ErrNotHeld, "a free lock has nothing to force")
		require.ErrorIs(t, ops.ForceUnlockToken(ctx, name, second.Token()+1), reentrant.ErrNotHeld)
		require.ErrorIs(t, ops.ForceUnlockToken(ctx, name, fence.None), reentrant.ErrInvalid)
		_, err = ops.ForceUnlock(ctx, "")
		require.ErrorIs(t, err, reentrant.ErrInvalid)
	})
}

// A lease says why it ended: gone from Redis, not confirmed in time, or its
// client closed; each is ErrLost.
func TestLossSaysWhy(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx := t.Context()
		c := newClient(t, b.Client, operatorLease...)
		l, err := c.Lock(ctx, testenv.Unique(t))
		require.NoError(t, err)
		require.NoError(t, b.Client.Del(ctx, lua.KeysFor(prefix, l.Name()).Lock).Err())
		err = awaitLoss(t, l)
		require.ErrorIs(t, err, reentrant.ErrGone)
		require.ErrorIs(t, err, reentrant.ErrLost)
		require.ErrorIs(t, err, reentrant.ErrNotHeld)
		require.False(t, errors.Is(err, reentrant.ErrUnconfirmed) || errors.Is(err, reentrant.ErrClosed))

		closing := newClient(t, b.Client)
		l, err = closing.Lock(ctx, testenv.Unique(t))
		require.NoError(t, err)
		require.NoError(t, closing.Close())
		err = l.Err()
		require.ErrorIs(t, err, reentrant.ErrLeaseClosed)
		require.ErrorIs(t, err, reentrant.ErrLost)
		require.ErrorIs(t, err, reentrant.ErrClosed)
		require.False(t, errors.Is(err, reentrant.ErrGone) || errors.Is(err, reentrant.ErrUnconfirmed))
		require.NoError(t, l.Unlock(ctx), "Unlock still works after Close")
	})
}
