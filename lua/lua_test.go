package lua_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripthook"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
)

// Load puts every script into the server's cache, under the SHA1 the
// wrappers send.
func TestLoad(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		require.NoError(t, lua.Load(ctx, rdb))
		for _, name := range []string{"acquire", "release", "extend", "inspect", "abandon"} {
			ok, err := rdb.ScriptExists(ctx, scripthook.Script(name).Hash()).Result()
			require.NoError(t, err)
			require.Equal(t, []bool{true}, ok, name)
		}
	})
}

func keys(t *testing.T) lua.Keys { return lua.KeysFor("rftest", testenv.Unique(t)) }

// assertLeaseShape checks the invariant after every acquire, reentry and
// extend in strict mode: the lease runs, and the hash, which holds the
// counter, never expires.
func assertLeaseShape(t *testing.T, rdb *redis.Client, k lua.Keys) {
	t.Helper()
	require.Greater(t, leaseLeft(t, rdb, k), time.Duration(0), "the lease must run")
	ttl, err := rdb.PTTL(t.Context(), k.Lock).Result()
	require.NoError(t, err)
	require.Equal(t, time.Duration(-1), ttl, "the hash holds the counter and must never expire")
}

// leaseLeft is what is left of the lease of k, as inspect reads it.
func leaseLeft(t *testing.T, rdb *redis.Client, k lua.Keys) time.Duration {
	t.Helper()
	st, err := lua.Inspect(t.Context(), rdb, k)
	require.NoError(t, err)
	return st.TTL
}

func TestRepeatedRequestsApplyOnce(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		run := func(level string) lua.Acquired {
			a, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o1", TTL: time.Minute, Level: level})
			require.NoError(t, err)
			assertLeaseShape(t, rdb, k)
			return a
		}
		first := run("r1")
		require.Equal(t, lua.Acquired{OK: true, Token: 1, Depth: 1}, first)
		require.Equal(t, first, run("r1"), "a repeated fresh acquire must not take a new token")
		require.Equal(t, lua.Acquired{OK: true, Token: 1, Depth: 2}, run("r2"))
		require.Equal(t, lua.Acquired{OK: true, Token: 1, Depth: 2}, run("r2"), "a repeated reentry must not count twice")

		rel := func(level string) int64 {
			n, err := lua.Release(ctx, rdb, k, "o1", first.Token, level, lua.Tokens{})
			require.NoError(t, err)
			return n
		}
		require.EqualValues(t, 1, rel("r2"))
		require.EqualValues(t, 1, rel("r2"), "a repeated partial release must not count twice")
		require.EqualValues(t, 0, rel("r1"))
		require.EqualValues(t, 0, rel("r1"), "a repeated full release must still report success")
		require.EqualValues(t, 0, rel("r5"), "the release of an ownership that ended by release is taken for a repeat")
		n, err := lua.Release(ctx, rdb, k, "o1", first.Token+1, "r5", lua.Tokens{})
		require.NoError(t, err)
		require.EqualValues(t, -1, n, "a token never issued is not held")

		// Someone else takes the lock; the old full release, repeated, must
		// still answer as before and must not touch the new holder.
		other, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o2", TTL: time.Minute, Level: "r6"})
		require.NoError(t, err)
		require.Equal(t, fence.Token(2), other.Token)
		require.EqualValues(t, 0, rel("r1"))
		// ...even after that other owner fully released in turn: an
		// ownership that ended by release answers its releases as done.
		n, err = lua.Release(ctx, rdb, k, "o2", other.Token, "r6", lua.Tokens{})
		require.NoError(t, err)
		require.Zero(t, n)
		require.EqualValues(t, 0, rel("r1"), "a retried release must not be told 'not held' after another owner's release")
		other, err = lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o2", TTL: time.Minute, Level: "r6b"})
		require.NoError(t, err)
		st, err := lua.Inspect(ctx, rdb, k)
		require.NoError(t, err)
		require.Equal(t, "o2", st.Owner)
		require.EqualValues(t, 1, st.Depth)
		require.Equal(t, []string{"r6b"}, st.Levels)
	})
}

// An ownership whose lease ran out is recorded as expired by the next
// script that writes, so a late or retried release of it is told "not
// held", on every path: the expired owner's own release, and another
// owner's acquire.
func TestReleaseAfterExpiryIsNotHeld(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		expire := func() { b.Expire(60 * time.Millisecond) }
		a, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o1", TTL: 50 * time.Millisecond, Level: "r1"})
		require.NoError(t, err)
		expire()
		n, err := lua.Release(ctx, rdb, k, "o1", a.Token, "r1", lua.Tokens{})
		require.NoError(t, err)
		require.EqualValues(t, -1, n, "the lease ran out before the release")
		b2, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o2", TTL: time.Minute, Level: "r2"})
		require.NoError(t, err)
		require.True(t, b2.OK)
		n, err = lua.Release(ctx, rdb, k, "o1", a.Token, "r1", lua.Tokens{})
		require.NoError(t, err)
		require.EqualValues(t, -1, n, "a retry, after another ownership began")
		st, err := lua.Inspect(ctx, rdb, k)
		require.NoError(t, err)
		require.Equal(t, []lua.Ended{{Token: a.Token, Owner: "o1", Expired: true}}, st.Ended)

		// Expired without a release: another owner's acquire records it.
		k = keys(t)
		a, err = lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o1", TTL: 50 * time.Millisecond, Level: "r1"})
		require.NoError(t, err)
		expire()
		b2, err = lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o2", TTL: time.Minute, Level: "r2"})
		require.NoError(t, err)
		require.Equal(t, a.Token+1, b2.Token)
		n, err = lua.Release(ctx, rdb, k, "o1", a.Token, "r1", lua.Tokens{})
		require.NoError(t, err)
		require.EqualValues(t, -1, n)
		n, err = lua.Release(ctx, rdb, k, "o2", b2.Token, "r2", lua.Tokens{})
		require.NoError(t, err)
		require.Zero(t, n)
		st, err = lua.Inspect(ctx, rdb, k)
		require.NoError(t, err)
		require.Equal(t, []lua.Ended{{Token: a.Token, Owner: "o1", Expired: true}, {Token: b2.Token, Owner: "o2"}}, st.Ended)
	})
}

// At most 16 expired ownerships are recorded, the most recent ones; a
// release of an older one is still told "not held".
func TestExpiredRecordsBounded(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		for i := range 20 {
			a, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: fmt.Sprint("r", i)})
			require.NoError(t, err)
			require.True(t, a.OK)
			require.NoError(t, rdb.HSet(ctx, k.Lock, "x", "1").Err()) // its lease ran out long ago
		}
		st, err := lua.Inspect(ctx, rdb, k)
		require.NoError(t, err)
		require.Len(t, st.Ended, 17, "16 recorded and the last, not yet")
		require.EqualValues(t, 4, st.Ended[0].Token)
		require.Len(t, rdb.HKeys(ctx, k.Lock).Val(), 16+5, "16 records, w, t, o, x and one level")
		for tok := range fence.Token(20) {
			n, err := lua.Release(ctx, rdb, k, "o", tok+1, fmt.Sprint("r", tok), lua.Tokens{})
			require.NoError(t, err)
			require.EqualValues(t, -1, n, "token %d expired", tok+1)
		}
	})
}

// The bug this layout fixes: an inner release (depth 2 to 1) whose reply
// is lost is retried by go-redis after the same owner reentered (depth 2
// again). The old script remembered only the last request, so the retry
// applied twice and freed a lock one level still relied on. Each level is
// now removed by its own ID, exactly once.
func TestRetriedPartialReleaseAfterReentryAppliesOnce(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		outer, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: "outer"})
		require.NoError(t, err)
		_, err = lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: "inner"})
		require.NoError(t, err)
		rel := func(level string) int64 {
			n, err := lua.Release(ctx, rdb, k, "o", outer.Token, level, lua.Tokens{})
			require.NoError(t, err)
			return n
		}
		require.EqualValues(t, 1, rel("inner"))
		again, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: "inner2"})
		require.NoError(t, err)
		require.EqualValues(t, 2, again.Depth)
		require.EqualValues(t, 2, rel("inner"), "the retry of a release already applied changes nothing")
		replayed, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: "inner2"})
		require.NoError(t, err)
		require.Equal(t, again, replayed, "a repeated reentry answers the depth it was granted, not today's")
		busy, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "other", TTL: time.Minute, Level: "x"})
		require.NoError(t, err)
		require.False(t, busy.OK, "the lock is still held at depth 2")
		require.EqualValues(t, 1, rel("inner2"))
		require.EqualValues(t, 0, rel("outer"))
	})
}

// Extending, reentering or renewing never shortens the lock: one level's
// short Extend must not cut the lease another level relies on.
func TestExtendNeverShortens(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		a, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Hour, Level: "outer"})
		require.NoError(t, err)
		ok, err := lua.Extend(ctx, rdb, k, "o", a.Token, time.Second, lua.Tokens{})
		require.NoError(t, err)
		require.True(t, ok)
		require.Greater(t, leaseLeft(t, rdb, k), 59*time.Minute, "a shorter extend must not shorten")
		_, err = lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Second, Level: "inner"})
		require.NoError(t, err)
		require.Greater(t, leaseLeft(t, rdb, k), 59*time.Minute, "a reentry with a shorter TTL must not shorten")
		ok, err = lua.Extend(ctx, rdb, k, "o", a.Token, 2*time.Hour, lua.Tokens{})
		require.NoError(t, err)
		require.True(t, ok)
		require.Greater(t, leaseLeft(t, rdb, k), 119*time.Minute, "a longer extend lengthens")
	})
}

func TestOwnerAndTokenChecked(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		a, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o1", TTL: time.Minute, Level: "a1"})
		require.NoError(t, err)

		// A second owner is refused and told the holder's remaining TTL.
		busy, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o2", TTL: time.Minute, Level: "a2"})
		require.NoError(t, err)
		require.False(t, busy.OK)
		require.Greater(t, busy.HolderTTL, 50*time.Second)

		for _, c := range []struct {
			owner string
			tok   fence.Token
		}{{"o2", a.Token}, {"o1", a.Token + 1}, {"o1", a.Token - 1}} {
			ok, err := lua.Extend(ctx, rdb, k, c.owner, c.tok, time.Hour, lua.Tokens{})
			require.NoError(t, err)
			require.False(t, ok, "extend by %v", c)
			n, err := lua.Release(ctx, rdb, k, c.owner, c.tok, "x"+c.owner+c.tok.String(), lua.Tokens{})
			require.NoError(t, err)
			require.EqualValues(t, -1, n, "release by %v", c)
		}
		ok, err := lua.Extend(ctx, rdb, k, "o1", a.Token, time.Hour, lua.Tokens{})
		require.NoError(t, err)
		require.True(t, ok)
		assertLeaseShape(t, rdb, k)
		require.Greater(t, leaseLeft(t, rdb, k), 59*time.Minute)
	})
}

// Lua numbers are doubles: tokens must survive the round trip through the
// scripts exactly, in every digit, up to the documented 2^53 bound.
func TestLargeTokensExact(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		for _, seed := range []int64{999_999, 1 << 40, 1<<53 - 2} {
			k := keys(t)
			require.NoError(t, rdb.HSet(ctx, k.Lock, "t", seed).Err())
			a, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: "r"})
			require.NoError(t, err)
			require.Equal(t, fence.Token(seed+1), a.Token)
			st, err := lua.Inspect(ctx, rdb, k)
			require.NoError(t, err)
			require.Equal(t, a.Token, st.Token)
			require.Equal(t, a.Token, st.LastToken)
			n, err := lua.Release(ctx, rdb, k, "o", a.Token, "r", lua.Tokens{})
			require.NoError(t, err)
			require.EqualValues(t, 0, n, "release with the exact token of seed %d", seed)
		}
		k := keys(t)
		require.NoError(t, rdb.HSet(ctx, k.Lock, "t", strconv.FormatInt(1<<53-1, 10)).Err())
		_, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: "r"})
		require.ErrorIs(t, err, lua.ErrOverflow)
		require.Equal(t, map[string]string{"t": strconv.FormatInt(1<<53-1, 10)}, rdb.HGetAll(ctx, k.Lock).Val(),
			"an overflowing acquire must not take the lock")
	})
}

func TestForeignValuesNamedAndUntouched(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		// Every script, on every kind of foreign lock key: refused with
		// ErrForeign naming the key, the server's reply still reachable
		// with errors.As, and nothing written.
		for _, plant := range []struct {
			what string
			set  func(key string) error
		}{
			{"string", func(key string) error { return rdb.Set(ctx, key, "not a hash", 0).Err() }},
			{"hash with other fields", func(key string) error { return rdb.HSet(ctx, key, "h", "10", "t", "10", "v", "x").Err() }},
			{"hash with a bad counter", func(key string) error { return rdb.HSet(ctx, key, "t", "x").Err() }},
			{"hash without a counter", func(key string) error { return rdb.HSet(ctx, key, "o", "o", "x", "9", "l:r", "1").Err() }},
			{"hash with a lease and no level", func(key string) error { return rdb.HSet(ctx, key, "t", "1", "o", "o", "x", "99999999999999").Err() }},
			{"hash with a level and no lease", func(key string) error { return rdb.HSet(ctx, key, "t", "1", "o", "o", "l:r", "1").Err() }},
			{"hash with a bad lease", func(key string) error { return rdb.HSet(ctx, key, "t", "1", "o", "o", "x", "-1", "l:r", "1").Err() }},
		} {
			k := keys(t)
			require.NoError(t, plant.set(k.Lock))
			before := snapshot(t, rdb, k.Lock)
			calls := map[string]func() error{
				"acquire": func() error {
					_, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: "r"})
					return err
				},
				"release": func() error { _, err := lua.Release(ctx, rdb, k, "o", 1, "r", lua.Tokens{}); return err },
				"extend":  func() error { _, err := lua.Extend(ctx, rdb, k, "o", 1, time.Minute, lua.Tokens{}); return err },
				"abandon": func() error { _, err := lua.Abandon(ctx, rdb, k, &lua.Request{Owner: "o", Level: "r"}); return err },
				"inspect": func() error { _, err := lua.Inspect(ctx, rdb, k); return err },
			}
			for name, call := range calls {
				err := call()
				require.ErrorIs(t, err, lua.ErrForeign, "%s on a %s", name, plant.what)
				require.ErrorContains(t, err, k.Lock)
				var rerr redis.Error
				require.True(t, errors.As(err, &rerr), "%s on a %s: the server's reply keeps its type", name, plant.what)
			}
			after := snapshot(t, rdb, k.Lock)
			require.Equal(t, before, after, "a %s must be left as it was", plant.what)
			require.EqualValues(t, -1, rdb.PTTL(ctx, k.Lock).Val(), "no TTL may be put on a %s", plant.what)
		}
	})
}

// snapshot returns a printable copy of key's type and contents (miniredis
// has no DUMP).
func snapshot(t *testing.T, rdb *redis.Client, key string) string {
	t.Helper()
	ctx := t.Context()
	kind := rdb.Type(ctx, key).Val()
	switch kind {
	case "string":
		return kind + ":" + rdb.Get(ctx, key).Val()
	case "hash":
		return kind + ":" + fmt.Sprint(rdb.HGetAll(ctx, key).Val())
	case "set":
		return kind + ":" + fmt.Sprint(rdb.SMembers(ctx, key).Val())
	case "zset":
		return kind + ":" + fmt.Sprint(rdb.ZRangeWithScores(ctx, key, 0, -1).Val())
	}
	t.Fatalf("snapshot of a %s", kind)
	return ""
}

func TestNoScriptFallsBackToEval(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		a, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: "r"})
		require.NoError(t, err)
		require.True(t, a.OK)
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		n, err := lua.Release(ctx, rdb, k, "o", a.Token, "r", lua.Tokens{})
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

func TestParseRejectsMalformed(t *testing.T) {
	for _, v := range []any{nil, "x", int64(1), []any{int64(1)}, []any{int64(1), int64(0), int64(1)},
		[]any{int64(1), int64(3), int64(0)}, []any{int64(2), int64(0), int64(1)}, []any{int64(0), int64(-3), int64(0)},
		[]any{"1", int64(1), int64(1)}} {
		_, err := lua.ParseAcquire(v)
		require.ErrorIs(t, err, lua.ErrReply, "%#v", v)
	}
	for _, v := range []any{nil, "0", int64(-2)} {
		_, err := lua.ParseRelease(v)
		require.ErrorIs(t, err, lua.ErrReply, "%#v", v)
	}
	for _, v := range []any{nil, int64(2), int64(-1)} {
		_, err := lua.ParseExtend(v)
		require.ErrorIs(t, err, lua.ErrReply, "%#v", v)
	}
	valid := func(edit func([]any)) []any {
		v := []any{"o", "1", int64(5), int64(1), []any{"a"}, int64(0), "o", []any{"1", "o", "expired"}, "job 7"}
		edit(v)
		return v
	}
	_, err := lua.ParseInspect(valid(func([]any) {}))
	require.NoError(t, err, "the base of the malformed replies below must parse")
	for _, v := range []any{nil, []any{}, valid(func(v []any) { v[1] = nil }),
		valid(func(v []any) { v[0], v[1], v[2] = nil, nil, int64(-9) }), valid(func(v []any) { v[4] = []any{} }),
		valid(func(v []any) { v[3] = "1" }), valid(func(v []any) { v[3] = int64(-1) }),
		valid(func(v []any) { v[1] = "0" }), valid(func(v []any) { v[4] = []any{int64(1)} }),
		valid(func(v []any) { v[0], v[1] = nil, nil }), valid(func(v []any) { v[2] = int64(-1) }),
		valid(func(v []any) { v[5] = int64(-1) }), valid(func(v []any) { v[5] = "1" }),
		valid(func(v []any) { v[7] = []any{"1", "o"} }), valid(func(v []any) { v[7] = []any{"1", "o", "lost"} }),
		valid(func(v []any) { v[7] = []any{"x", "o", "released"} }), valid(func(v []any) { v[7] = "1" }),
		valid(func(v []any) { v[8] = int64(1) }), valid(func(v []any) { v[0], v[1], v[2], v[4] = nil, nil, int64(-2), []any{} }),
		[]any{"o", "1", int64(5), int64(1), []any{"a"}, int64(0), "o", []any{}}} {
		_, err := lua.ParseInspect(v)
		require.True(t, errors.Is(err, lua.ErrReply), "%#v: %v", v, err)
	}
}

func TestAbandonUndoesOnlyThatRequest(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		_, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: "a1"})
		require.NoError(t, err)
		undone, err := lua.Abandon(ctx, rdb, k, &lua.Request{Owner: "o", Level: "a1"})
		require.NoError(t, err)
		require.True(t, undone)
		st, err := lua.Inspect(ctx, rdb, k)
		require.NoError(t, err)
		require.Empty(t, st.Owner, "an abandoned fresh acquisition frees the lock")

		_, err = lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: "a2"})
		require.NoError(t, err)
		_, err = lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: "a3"})
		require.NoError(t, err)
		for _, c := range []struct{ owner, req string }{{"x", "a3"}, {"o", "nope"}} {
			undone, err = lua.Abandon(ctx, rdb, k, &lua.Request{Owner: c.owner, Level: c.req})
			require.NoError(t, err)
			require.False(t, undone, "%v: not a level of this owner", c)
		}
		undone, err = lua.Abandon(ctx, rdb, k, &lua.Request{Owner: "o", Level: "a3"})
		require.NoError(t, err)
		require.True(t, undone)
		undone, err = lua.Abandon(ctx, rdb, k, &lua.Request{Owner: "o", Level: "a3"})
		require.NoError(t, err)
		require.False(t, undone, "a repeated abandon must not undo twice")
		_, err = lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: "a4"})
		require.NoError(t, err)
		undone, err = lua.Abandon(ctx, rdb, k, &lua.Request{Owner: "o", Level: "a2"})
		require.NoError(t, err)
		require.True(t, undone, "a level is undone by its ID even after later reentries")
		st, err = lua.Inspect(ctx, rdb, k)
		require.NoError(t, err)
		require.EqualValues(t, 1, st.Depth)
		require.EqualValues(t, 2, st.LastToken, "the counter is never rolled back")
	})
}

// Found by fuzzing: a PTTL beyond what a Duration holds must not wrap.
func TestHugePTTLSaturates(t *testing.T) {
	a, err := lua.ParseAcquire([]any{int64(0), int64(847736400446211), int64(0)})
	require.NoError(t, err)
	require.Greater(t, a.HolderTTL, 100*365*24*time.Hour)
	a, err = lua.ParseAcquire([]any{int64(2), int64(7), int64(3)})
	require.NoError(t, err)
	require.Equal(t, lua.Acquired{TooDeep: true, Token: 7, Depth: 3}, a)
	a, err = lua.ParseAcquire([]any{int64(0), int64(847736400446211), int64(0)})
	require.NoError(t, err)
	require.Greater(t, a.HolderTTL, 100*365*24*time.Hour)
	s, err := lua.ParseInspect([]any{"o", "1", int64(1 << 62), int64(1), []any{"a"}, int64(0), "o", []any{}, nil})
	require.NoError(t, err)
	require.Greater(t, s.TTL, 100*365*24*time.Hour)
}
