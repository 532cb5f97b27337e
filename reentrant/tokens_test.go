//go:build unix

package reentrant_test

import (
	"context"
	"errors"
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
				k := scripts.KeysFor(prefix, name)
				require.NoError(t, srv.Client().Del(t.Context(), k.Lock, k.Queue, k.Counter, k.Forced, k.Floor).Err())
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
				got, err := scripts.Inspect(t.Context(), replica.Client(), scripts.KeysFor(prefix, name))
				require.NoError(t, err)
				require.Less(t, max(got.Counter, got.Floor), before, "the promoted replica must have missed tokens")
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
// name leaves nothing but its slot's floor, which expires the floor's idle
// time (7 days) after its last write, up to a sixteenth more; with
// WithStrictTokens the name's counter is all it leaves, and never expires.
func TestEveryKeyExpires(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		const idle = 7 * 24 * time.Hour
		for _, c := range []struct {
			opts []reentrant.ClientOption
			desc string
		}{{[]reentrant.ClientOption{reentrant.WithStrictTokens()}, "strict"}, {nil, "default"}} {
			// A prefix per mode: one prefix, one token mode.
			p := prefix + "-" + c.desc
			lc, name := newClient(t, b.Client, append(c.opts, reentrant.WithPrefix(p))...), testenv.Unique(t)
			l, err := lc.Lock(t.Context(), name)
			require.NoError(t, err)
			require.NoError(t, l.Unlock(t.Context()))
			k := scripts.KeysFor(p, name)
			for _, key := range []string{k.Lock, k.Queue, k.Forced} {
				require.Equal(t, time.Duration(-2), b.Client.PTTL(t.Context(), key).Val(), "%s: %s must not exist", c.desc, key)
			}
			st, err := lc.Inspect(t.Context(), name)
			require.NoError(t, err)
			if c.desc == "strict" {
				require.Equal(t, time.Duration(-1), b.Client.PTTL(t.Context(), k.Counter).Val(), "the strict counter never expires")
				require.Equal(t, time.Duration(-2), b.Client.PTTL(t.Context(), k.Floor).Val(), "no floor")
				require.Equal(t, reentrant.State{Name: name, LastToken: l.Token()}, st, "the counter is the last token")
				continue
			}
			require.Equal(t, time.Duration(-2), b.Client.PTTL(t.Context(), k.Counter).Val(), "no strict counter")
			ttl := b.Client.PTTL(t.Context(), k.Floor).Val()
			require.Greater(t, ttl, idle-time.Minute, "the floor %s outlives its last write by the idle time", k.Floor)
			require.LessOrEqual(t, ttl, idle+idle/16, "and by at most a sixteenth more")
			require.GreaterOrEqual(t, st.LastToken, l.Token(), "the floor is at least the last token")
		}
		// Only miniredis's clock can pass the idle time in a test: past it
		// nothing is left, and the next token is still above the last.
		if b.Mini == nil {
			return
		}
		lc, name := newClient(t, b.Client), testenv.Unique(t)
		last := issue(t, lc, name, 3)
		k := scripts.KeysFor(prefix, name)
		require.Zero(t, b.Client.Exists(t.Context(), k.Lock, k.Queue, k.Counter, k.Forced).Val())
		st, err := lc.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.Equal(t, reentrant.State{Name: name, LastToken: last}, st, "only the slot's floor is left")
		testenv.Advance(b.Mini, idle-time.Minute)
		require.EqualValues(t, 1, b.Client.Exists(t.Context(), k.Floor).Val(), "the floor lives the idle time")
		testenv.Advance(b.Mini, idle/16+time.Minute)
		require.Zero(t, b.Client.Exists(t.Context(), k.Lock, k.Queue, k.Counter, k.Forced, k.Floor).Val(), "nothing is left")
		require.Greater(t, issue(t, lc, name, 1), last)
	})
}

// Clients of one prefix must share a token mode: a time-token (default)
// client that meets a name's strict counter, and a strict client that
// meets the floor of the name's slot, are refused with ErrInvalid naming
// the key, having written nothing, whichever came first and whether the
// name is held or free: a name never has two holders, and neither mode
// hands out a token below the other's. Clients of the two modes on
// separate prefixes work side by side.
func TestTokenModesOnOnePrefixRefused(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, p := t.Context(), testenv.Unique(t)
		strict := newClient(t, b.Client, reentrant.WithPrefix(p), reentrant.WithStrictTokens())
		timed := newClient(t, b.Client, reentrant.WithPrefix(p))
		// Two names in different slots, and a third in the slot of the second.
		bc, slot := testenv.SameSlot(p, "b", 2)
		a := testenv.NameWhere(p, "a", func(s int) bool { return s != slot })
		ka, kb, kc := scripts.KeysFor(p, a), scripts.KeysFor(p, bc[0]), scripts.KeysFor(p, bc[1])
		require.Equal(t, kb.Floor, kc.Floor)
		require.NotEqual(t, ka.Floor, kb.Floor)
		keys := func() []string { return snapshot(t, b.Client, ka, kb, kc) }
		// refused checks that err is the mode refusal naming key, and that
		// the call changed none of the names' keys (before: keys()).
		refused := func(err error, key string, before []string) {
			t.Helper()
			require.ErrorIs(t, err, reentrant.ErrInvalid)
			require.ErrorContains(t, err, key)
			require.NotErrorIs(t, err, reentrant.ErrNotAcquired)
			require.Equal(t, before, keys(), "a refused call writes nothing")
		}
		// wait is a Lock's context: a refusal must not wait for it to end.
		wait := func() context.Context {
			c, cancel := context.WithTimeout(ctx, time.Minute)
			t.Cleanup(cancel)
			return c
		}

		// The strict client first, on a: the time-token client is refused
		// while a is held and after, on its counter.
		sa, err := strict.Lock(ctx, a)
		require.NoError(t, err)
		require.Equal(t, fence.Token(1), sa.Token())
		before := keys()
		_, err = timed.TryLock(ctx, a)
		refused(err, ka.Counter, before)
		_, err = timed.Lock(wait(), a)
		refused(err, ka.Counter, before)
		_, err = timed.LockMulti(wait(), []string{bc[0], a})
		refused(err, ka.Counter, before)
		st, err := strict.Inspect(ctx, a)
		require.NoError(t, err)
		require.True(t, st.Held && st.Owner == string(sa.Owner()) && st.Depth == 1, "%+v", st)
		require.NoError(t, sa.Unlock(ctx))
		before = keys()
		_, err = timed.TryLock(ctx, a)
		refused(err, ka.Counter, before)
		sa2, err := strict.Lock(ctx, a)
		require.NoError(t, err)
		require.Equal(t, fence.Token(2), sa2.Token(), "the strict counter goes on")
		require.NoError(t, sa2.Unlock(ctx))

		// The time-token client first, on b: the strict client is refused on
		// b while it is held and after, and on c, never locked, of b's slot.
		tb, err := timed.Lock(ctx, bc[0])
		require.NoError(t, err)
		require.Greater(t, tb.Token(), fence.Token(2))
		before = keys()
		for _, name := range bc {
			_, err = strict.TryLock(ctx, name)
			refused(err, kb.Floor, before)
			_, err = strict.Lock(wait(), name)
			refused(err, kb.Floor, before)
		}
		_, err = strict.LockMulti(wait(), []string{a, bc[1]})
		refused(err, kb.Floor, before)
		st, err = timed.Inspect(ctx, bc[0])
		require.NoError(t, err)
		require.True(t, st.Held && st.Owner == string(tb.Owner()) && st.Depth == 1, "%+v", st)
		require.NoError(t, tb.Unlock(ctx))
		before = keys()
		for _, name := range bc {
			_, err = strict.TryLock(ctx, name)
			refused(err, kb.Floor, before)
		}
		tb2, err := timed.Lock(ctx, bc[0])
		require.NoError(t, err)
		require.Greater(t, tb2.Token(), tb.Token(), "the time tokens go on")
		require.NoError(t, tb2.Unlock(ctx))

		// Separate prefixes: each mode on its own, on the same names.
		for _, name := range []string{a, bc[0]} {
			s, err := newClient(t, b.Client, reentrant.WithPrefix(p+"-strict"), reentrant.WithStrictTokens()).Lock(ctx, name)
			require.NoError(t, err)
			tl, err := newClient(t, b.Client, reentrant.WithPrefix(p+"-time")).Lock(ctx, name)
			require.NoError(t, err)
			require.Equal(t, fence.Token(1), s.Token())
			require.Greater(t, tl.Token(), tb2.Token())
			require.NoError(t, s.Unlock(ctx))
			require.NoError(t, tl.Unlock(ctx))
		}
	})
}

// snapshot is every key of the locks ks as testenv.Snapshot prints it.
func snapshot(t *testing.T, rdb redis.UniversalClient, ks ...scripts.Keys) []string {
	t.Helper()
	var out []string
	for _, k := range ks {
		for _, key := range []string{k.Lock, k.Queue, k.Counter, k.Forced, k.Floor} {
			out = append(out, key+": "+testenv.Snapshot(t, rdb, key))
		}
	}
	return out
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

	k := scripts.KeysFor(prefix, name)
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

		forced, err := ops.ForceUnlock(ctx, name, fence.None)
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

		// A repeat, by token, changes nothing and succeeds; the current
		// holder is untouched.
		require.NoError(t, reentrant.ForceUnlockToken(ops, ctx, name, first.Token()))
		require.NoError(t, second.Err())
		// The holder's own token: ended; then the lock is free.
		require.NoError(t, reentrant.ForceUnlockToken(ops, ctx, name, second.Token()))
		_, err = ops.ForceUnlock(ctx, name, fence.None)
		require.ErrorIs(t, err, reentrant.ErrNotHeld, "a free lock has nothing to force")
		require.ErrorIs(t, reentrant.ForceUnlockToken(ops, ctx, name, second.Token()+1), reentrant.ErrNotHeld)
		_, err = ops.ForceUnlock(ctx, "", fence.None)
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
		require.NoError(t, b.Client.Del(ctx, scripts.KeysFor(prefix, l.Name()).Lock).Err())
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

// A lease ended by ForceUnlock says so, whichever of its calls learns it
// first: its next Unlock (even once another owner took the lock), its next
// Extend, or its next renewal report who forced it (the record force.lua
// leaves), as does the cause its context ends with.
func TestForcedLeaseSaysWhoForcedIt(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx := t.Context()
		c := newClient(t, b.Client, reentrant.WithoutRenewal())
		ops := newClient(t, b.Client, reentrant.WithIdentity("ops@bastion"))
		forced := func(name string, l *reentrant.Lease) {
			t.Helper()
			tok, err := ops.ForceUnlock(ctx, name, fence.None)
			require.NoError(t, err)
			require.Equal(t, l.Token(), tok)
		}
		saysWho := func(l *reentrant.Lease, err error) {
			t.Helper()
			require.ErrorIs(t, err, reentrant.ErrNotHeld)
			require.NotErrorIs(t, err, reentrant.ErrUnconfirmed)
			require.ErrorContains(t, err, `forced unlock by "ops@bastion"`)
			require.ErrorIs(t, l.Err(), reentrant.ErrGone)
			require.ErrorContains(t, l.Err(), `forced by "ops@bastion" at `)
		}

		t.Run("extend", func(t *testing.T) {
			name := testenv.Unique(t)
			l, err := c.Lock(ctx, name)
			require.NoError(t, err)
			forced(name, l)
			saysWho(l, l.Extend(ctx, time.Minute))
		})
		t.Run("unlock", func(t *testing.T) {
			name := testenv.Unique(t)
			l, err := c.Lock(ctx, name)
			require.NoError(t, err)
			forced(name, l)
			require.NoError(t, l.Err(), "nothing told the lease yet")
			saysWho(l, l.Unlock(ctx))
			require.ErrorIs(t, l.Unlock(ctx), reentrant.ErrNotHeld, "once")
		})
		t.Run("unlock after another owner took it", func(t *testing.T) {
			name := testenv.Unique(t)
			l, err := c.Lock(ctx, name)
			require.NoError(t, err)
			forced(name, l)
			next, err := ops.TryLock(ctx, name)
			require.NoError(t, err)
			saysWho(l, l.Unlock(ctx))
			st, err := ops.Inspect(ctx, name)
			require.NoError(t, err)
			require.True(t, st.Held && st.Token == next.Token(), "the release left the next owner alone: %+v", st)
			require.NoError(t, next.Unlock(ctx))
		})
		t.Run("renewal", func(t *testing.T) {
			name := testenv.Unique(t)
			renewed := newClient(t, b.Client, operatorLease...)
			l, err := renewed.Lock(ctx, name)
			require.NoError(t, err)
			forced(name, l)
			err = awaitLoss(t, l)
			require.ErrorIs(t, err, reentrant.ErrGone)
			require.ErrorContains(t, err, `forced by "ops@bastion" at `)
			saysWho(l, l.Unlock(ctx))
		})

		// Deleted by hand, not forced: the cause says what it cannot tell.
		name := testenv.Unique(t)
		l, err := c.Lock(ctx, name)
		require.NoError(t, err)
		require.NoError(t, b.Client.Del(ctx, scripts.KeysFor(prefix, name).Lock).Err())
		err = l.Extend(ctx, time.Minute)
		require.ErrorIs(t, err, reentrant.ErrNotHeld)
		require.NotContains(t, err.Error(), "forced")
		require.ErrorIs(t, l.Err(), reentrant.ErrGone)
		require.ErrorContains(t, l.Err(), "Redis found it gone: deleted, or taken by another owner")
	})
}

// Inspect of a free name: not held, and no owner, token, depth, lease,
// levels or metadata; LastToken is what the name's next token will be
// above: the floor of the name's slot with time tokens (the default), for
// a name never locked too, and the name's own counter with
// WithStrictTokens; Forced while a forced unlock's record lives. Each mode
// on a prefix of its own, checked against the keys themselves.
func TestInspectFreeName(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx := t.Context()
		for _, mode := range []struct {
			name string
			opts []reentrant.ClientOption
		}{{"time", nil}, {"strict", []reentrant.ClientOption{reentrant.WithStrictTokens()}}} {
			t.Run(mode.name, func(t *testing.T) {
				p := testenv.Unique(t)
				c := newClient(t, b.Client, append(mode.opts, reentrant.WithPrefix(p), reentrant.WithIdentity("ops"))...)
				names, _ := testenv.SameSlot(p, "n", 2)
				k0, k1 := scripts.KeysFor(p, names[0]), scripts.KeysFor(p, names[1])
				counter := func(k scripts.Keys) fence.Token {
					t.Helper()
					key := k.Counter
					if mode.name == "time" {
						key = k.Floor
					}
					v, err := b.Client.Get(ctx, key).Uint64()
					require.NoError(t, err, key)
					return fence.Token(v)
				}
				inspect := func(name string) reentrant.State {
					t.Helper()
					st, err := c.Inspect(ctx, name)
					require.NoError(t, err)
					return st
				}
				require.Equal(t, reentrant.State{Name: names[1]}, inspect(names[1]), "never locked, nothing issued in its slot")

				// Another name of the slot is locked and released.
				first := issue(t, c, names[0], 2)
				require.Equal(t, first, counter(k0))
				want := reentrant.State{Name: names[1]}
				if mode.name == "time" {
					want.LastToken = first // the slot's floor
				}
				require.Equal(t, want, inspect(names[1]), "a name never locked, in the slot of one that was")
				require.Equal(t, reentrant.State{Name: names[0], LastToken: first}, inspect(names[0]))

				// The name itself, locked and released.
				tok := issue(t, c, names[1], 1)
				if mode.name == "time" {
					require.Greater(t, tok, first, "above the slot's floor")
				} else {
					require.Equal(t, fence.Token(1), tok, "the name's own counter")
				}
				require.Equal(t, tok, counter(k1))
				require.Equal(t, reentrant.State{Name: names[1], LastToken: tok}, inspect(names[1]))

				// Freed by a forced unlock: its record shows, while it lives.
				l, err := c.Lock(ctx, names[1])
				require.NoError(t, err)
				forced, err := c.ForceUnlock(ctx, names[1], fence.None)
				require.NoError(t, err)
				require.Equal(t, l.Token(), forced)
				st := inspect(names[1])
				require.NotNil(t, st.Forced)
				require.Equal(t, reentrant.Forced{Token: l.Token(), At: st.Forced.At, By: "ops"}, *st.Forced)
				require.WithinDuration(t, time.Now(), st.Forced.At, time.Minute, "the server's clock, which this machine shares")
				require.Equal(t, reentrant.State{Name: names[1], LastToken: l.Token(), Forced: st.Forced}, st)
				require.ErrorIs(t, l.Unlock(ctx), reentrant.ErrNotHeld)
			})
		}
	})
}
