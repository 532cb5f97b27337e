//go:build unix

package reentrant_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
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

// The events that lose what Redis knew of a name: with the default options
// (time tokens) the first token after each is above every token before it;
// the strict counter starts again at 1. Each runs on private servers.
func TestDefaultTokensSurviveLostData(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []reentrant.ClientOption
	}{{"default", nil}, {"strict", []reentrant.ClientOption{reentrant.WithStrictTokens()}}} {
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
			t.Run("del-every-key", func(t *testing.T) {
				// An operator deletes every key of the name, and, reading
				// docs/design.md, its slot's floor too.
				srv := redisproc.Start(t)
				c, name := newClient(t, srv.Client(), mode.opts...), testenv.Unique(t)
				before := issue(t, c, name, 5)
				k := scripts.SharedKeysFor(prefix, name)
				require.NoError(t, srv.Client().Del(t.Context(), k.Lock, k.Queue, k.Counter, k.Floor).Err())
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
				got, err := scripts.Inspect(t.Context(), replica.Client(), scripts.SharedKeysFor(prefix, name), scripts.Tokens{})
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
	if mode == "default" {
		require.Greater(t, after, before, "the first token after the data was lost must be above every earlier one")
		return
	}
	require.LessOrEqual(t, after, before, "the strict counter, lost, repeats tokens (the contrast)")
}

// With the default options every key a name writes expires: a released
// name's record one to two record times after the release (a field of a
// shared record hash; its own hash is deleted), the floor its idle time
// after the last token; with WithStrictTokens the name's counter never
// expires.
func TestEveryKeyExpires(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		for _, c := range []struct {
			opts       []reentrant.ClientOption
			rec, floor time.Duration // 0: no such key; -1: never expires
			desc       string
		}{
			{[]reentrant.ClientOption{reentrant.WithStrictTokens()}, 0, 0, "strict"},
			{nil, reentrant.DefaultRecordExpiry, reentrant.DefaultCounterIdleExpiry, "default"},
			{[]reentrant.ClientOption{reentrant.WithTimeTokens(), reentrant.WithCounterIdleExpiry(2 * time.Hour),
				reentrant.WithRecordExpiry(20 * time.Second)}, 20 * time.Second, 2 * time.Hour, "2 h, 20 s"},
		} {
			// A prefix per case: clients with different record times would
			// share record hashes, whose expiry the first record of a
			// generation sets (docs/safety.md).
			p := prefix + "-" + strings.ReplaceAll(c.desc, " ", "")
			lc, name := newClient(t, b.Client, append(c.opts, reentrant.WithPrefix(p))...), testenv.Unique(t)
			l, err := lc.Lock(t.Context(), name)
			require.NoError(t, err)
			require.NoError(t, l.Unlock(t.Context()))
			k := scripts.SharedKeysFor(p, name)
			within := func(key string, want time.Duration) {
				t.Helper()
				ttl := b.Client.PTTL(t.Context(), key).Val()
				switch want {
				case 0:
					require.Equal(t, time.Duration(-2), ttl, "%s: %s must not exist", c.desc, key)
				default:
					require.Greater(t, ttl, want-time.Minute/2, "%s: %s", c.desc, key)
					require.LessOrEqual(t, ttl, want, "%s: %s", c.desc, key)
				}
			}
			if c.rec == 0 {
				require.Equal(t, time.Duration(-1), b.Client.PTTL(t.Context(), k.Counter).Val(), "the strict counter never expires")
				within(k.Lock, 0)
			} else {
				// Released cleanly, the name is stowed: no hash, and its
				// record a field of a shared record hash that expires one
				// to two record times after the release.
				within(k.Lock, 0)
				rttl := recordTTL(t, b.Client, k, c.rec)
				require.Greater(t, rttl, c.rec-time.Minute/2, "%s: the record lives the record time", c.desc)
				require.LessOrEqual(t, rttl, 2*c.rec, "%s: and at most twice it", c.desc)
				within(k.Floor, c.floor)
				within(k.Counter, 0)
			}
			within(k.Queue, 0)
			st, err := lc.Inspect(t.Context(), name)
			require.NoError(t, err)
			require.Equal(t, l.Token(), st.LastToken)
			require.Equal(t, string(l.Owner()), st.LastOwner, "the record names the last owner")
		}
		// The idle expiry is at least an hour (MinCounterIdleExpiry): only
		// miniredis's clock can pass it in a test.
		if b.Mini == nil {
			return
		}
		// Released, the name has no key of its own; past twice the record
		// time, no record either; past the idle time, nothing at all. The
		// next token is still above the last.
		lc, name := newClient(t, b.Client, reentrant.WithCounterIdleExpiry(time.Hour)), testenv.Unique(t)
		last := issue(t, lc, name, 3)
		k := scripts.SharedKeysFor(prefix, name)
		testenv.Advance(b.Mini, 2*reentrant.DefaultRecordExpiry+time.Millisecond)
		require.Zero(t, b.Client.Exists(t.Context(), k.Lock, k.Queue, k.Counter).Val())
		require.EqualValues(t, 1, b.Client.Exists(t.Context(), k.Floor).Val())
		st, err := lc.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.Equal(t, reentrant.State{Name: name, Floor: last}, st, "only the slot's floor is left")
		testenv.Advance(b.Mini, time.Hour)
		require.Zero(t, b.Client.Exists(t.Context(), k.Lock, k.Queue, k.Counter, k.Floor).Val())
		require.Greater(t, issue(t, lc, name, 1), last)
	})
}

func TestTimeTokenOptionsBadInput(t *testing.T) {
	_, rdb := testenv.Mini(t)
	for _, opts := range [][]reentrant.ClientOption{
		{reentrant.WithStrictTokens(), reentrant.WithCounterIdleExpiry(24 * time.Hour)}, // the strict counter never expires
		{reentrant.WithStrictTokens(), reentrant.WithRecordExpiry(time.Minute)},
		{reentrant.WithStrictTokens(), reentrant.WithTimeTokens()},
		{reentrant.WithTimeTokens(), reentrant.WithStrictTokens()},
		{reentrant.WithCounterIdleExpiry(reentrant.MinCounterIdleExpiry - time.Millisecond)},
		{reentrant.WithCounterIdleExpiry(reentrant.MaxCounterIdleExpiry + time.Millisecond)},
		{reentrant.WithCounterIdleExpiry(time.Hour + time.Microsecond)},
		{reentrant.WithCounterIdleExpiry(2 * time.Hour), reentrant.WithTTL(3 * time.Hour)},
		{reentrant.WithRecordExpiry(reentrant.MinRecordExpiry - time.Millisecond)},
		{reentrant.WithRecordExpiry(time.Minute + time.Microsecond)},
		{reentrant.WithCounterIdleExpiry(time.Hour), reentrant.WithRecordExpiry(2 * time.Hour)},
	} {
		_, err := reentrant.New(rdb, opts...)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
	}
	for _, opts := range [][]reentrant.ClientOption{
		{reentrant.WithTimeTokens()},
		{reentrant.WithStrictTokens()},
		{reentrant.WithCounterIdleExpiry(reentrant.MinCounterIdleExpiry)},
		{reentrant.WithCounterIdleExpiry(reentrant.MaxCounterIdleExpiry)},
		{reentrant.WithRecordExpiry(reentrant.MinRecordExpiry)},
		{reentrant.WithCounterIdleExpiry(time.Hour), reentrant.WithRecordExpiry(time.Hour)},
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
		strict, timed := newClient(t, b.Client, reentrant.WithStrictTokens()), newClient(t, b.Client)
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

	k := scripts.SharedKeysFor(prefix, name)
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
		require.ErrorContains(t, err, `forced by "ops@bastion" at `, "the loss says who forced it")
		err = first.Extend(ctx, time.Minute)
		require.ErrorIs(t, err, reentrant.ErrNotHeld)

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
		require.NoError(t, b.Client.Del(ctx, scripts.SharedKeysFor(prefix, l.Name()).Lock).Err())
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

// A lease ended by ForceUnlock says so: its Extend, and the cause its
// context ends with, name who forced it (the record force.lua leaves).
func TestForcedLeaseSaysWhoForcedIt(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, name := t.Context(), testenv.Unique(t)
		c := newClient(t, b.Client, reentrant.WithoutRenewal())
		ops := newClient(t, b.Client, reentrant.WithIdentity("ops@bastion"))
		l, err := c.Lock(ctx, name)
		require.NoError(t, err)
		_, err = ops.ForceUnlock(ctx, name)
		require.NoError(t, err)
		err = l.Extend(ctx, time.Minute)
		require.ErrorIs(t, err, reentrant.ErrNotHeld)
		require.ErrorContains(t, err, `forced unlock by "ops@bastion"`)
		require.ErrorIs(t, l.Err(), reentrant.ErrGone)
		require.ErrorContains(t, l.Err(), `forced by "ops@bastion" at `)

		// Deleted by hand, not forced: the cause says what it cannot tell.
		l, err = c.Lock(ctx, name)
		require.NoError(t, err)
		require.NoError(t, b.Client.Del(ctx, scripts.SharedKeysFor(prefix, name).Lock).Err())
		require.ErrorIs(t, l.Extend(ctx, time.Minute), reentrant.ErrNotHeld)
		require.ErrorContains(t, l.Err(), "expired, taken, forced or deleted")
	})
}

// recordTTL returns how long the record hash of record time rec that holds
// k's record has to live; it fails t when no record hash holds one.
func recordTTL(t *testing.T, rdb redis.UniversalClient, k scripts.Keys, rec time.Duration) time.Duration {
	t.Helper()
	for _, rk := range k.Records(scripts.Tokens{Time: true, Record: rec}) {
		if rdb.HExists(t.Context(), rk, k.RecordField()).Val() {
			return rdb.PTTL(t.Context(), rk).Val()
		}
	}
	require.Fail(t, "no record", "no record hash of %s holds %s", k.Floor, k.RecordField())
	return 0
}
