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
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
)

func TestScriptsLoadIntoRealRedis(t *testing.T) {
	rdb := testenv.Redis(t)
	for name, s := range lua.Scripts {
		sha, err := s.Load(t.Context(), rdb).Result()
		require.NoError(t, err, name)
		require.Equal(t, s.Hash(), sha, name)
	}
}

func keys(t *testing.T) lua.Keys { return lua.KeysFor("rftest", testenv.Unique(t)) }

// assertLeaseShape checks the invariant after every acquire, reentry and
// extend: the lock hash expires, the counter never does.
func assertLeaseShape(t *testing.T, rdb *redis.Client, k lua.Keys) {
	t.Helper()
	ttl, err := rdb.PTTL(t.Context(), k.Lock).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, time.Duration(0), "lock hash must carry a TTL")
	ttl, err = rdb.PTTL(t.Context(), k.Fence).Result()
	require.NoError(t, err)
	require.Equal(t, time.Duration(-1), ttl, "counter must never expire")
}

func TestRepeatedRequestsApplyOnce(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		run := func(level string) lua.Acquired {
			a, err := lua.Acquire(ctx, rdb, k, "o1", time.Minute, level, nil, lua.Tokens{})
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
			n, err := lua.Release(ctx, rdb, k, "o1", first.Token, level, time.Minute, lua.Tokens{})
			require.NoError(t, err)
			return n
		}
		require.EqualValues(t, 1, rel("r2"))
		require.EqualValues(t, 1, rel("r2"), "a repeated partial release must not count twice")
		require.EqualValues(t, 0, rel("r1"))
		require.EqualValues(t, 0, rel("r1"), "a repeated full release must still report success")
		require.EqualValues(t, -1, rel("r5"), "a release of a level never taken, on a free lock, is not held")

		// Someone else takes the lock; the old full release, repeated, must
		// still answer as before and must not touch the new holder.
		other, err := lua.Acquire(ctx, rdb, k, "o2", time.Minute, "r6", nil, lua.Tokens{})
		require.NoError(t, err)
		require.Equal(t, fence.Token(2), other.Token)
		require.EqualValues(t, 0, rel("r1"))
		// ...even after that other owner fully released in turn: each full
		// release leaves its own tombstone.
		n, err := lua.Release(ctx, rdb, k, "o2", other.Token, "r6", time.Minute, lua.Tokens{})
		require.NoError(t, err)
		require.Zero(t, n)
		require.EqualValues(t, 0, rel("r1"), "a retried release must not be told 'not held' after another owner's release")
		other, err = lua.Acquire(ctx, rdb, k, "o2", time.Minute, "r6b", nil, lua.Tokens{})
		require.NoError(t, err)
		st, err := lua.Inspect(ctx, rdb, k)
		require.NoError(t, err)
		require.Equal(t, "o2", st.Owner)
		require.EqualValues(t, 1, st.Depth)
		require.Equal(t, []string{"r6b"}, st.Levels)
		// The tombstone says whose release it was.
		require.Equal(t, "1 o1", rdb.Get(ctx, k.TombstoneFor("r1")).Val())
		require.Equal(t, "2 o2", rdb.Get(ctx, k.TombstoneFor("r6")).Val())
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
		outer, err := lua.Acquire(ctx, rdb, k, "o", time.Minute, "outer", nil, lua.Tokens{})
		require.NoError(t, err)
		_, err = lua.Acquire(ctx, rdb, k, "o", time.Minute, "inner", nil, lua.Tokens{})
		require.NoError(t, err)
		rel := func(level string) int64 {
			n, err := lua.Release(ctx, rdb, k, "o", outer.Token, level, time.Minute, lua.Tokens{})
			require.NoError(t, err)
			return n
		}
		require.EqualValues(t, 1, rel("inner"))
		again, err := lua.Acquire(ctx, rdb, k, "o", time.Minute, "inner2", nil, lua.Tokens{})
		require.NoError(t, err)
		require.EqualValues(t, 2, again.Depth)
		require.EqualValues(t, 2, rel("inner"), "the retry of a release already applied changes nothing")
		replayed, err := lua.Acquire(ctx, rdb, k, "o", time.Minute, "inner2", nil, lua.Tokens{})
		require.NoError(t, err)
		require.Equal(t, again, replayed, "a repeated reentry answers the depth it was granted, not today's")
		busy, err := lua.Acquire(ctx, rdb, k, "other", time.Minute, "x", nil, lua.Tokens{})
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
		a, err := lua.Acquire(ctx, rdb, k, "o", time.Hour, "outer", nil, lua.Tokens{})
		require.NoError(t, err)
		ok, err := lua.Extend(ctx, rdb, k, "o", a.Token, time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		require.Greater(t, rdb.PTTL(ctx, k.Lock).Val(), 59*time.Minute, "a shorter extend must not shorten")
		_, err = lua.Acquire(ctx, rdb, k, "o", time.Second, "inner", nil, lua.Tokens{})
		require.NoError(t, err)
		require.Greater(t, rdb.PTTL(ctx, k.Lock).Val(), 59*time.Minute, "a reentry with a shorter TTL must not shorten")
		ok, err = lua.Extend(ctx, rdb, k, "o", a.Token, 2*time.Hour)
		require.NoError(t, err)
		require.True(t, ok)
		require.Greater(t, rdb.PTTL(ctx, k.Lock).Val(), 119*time.Minute, "a longer extend lengthens")
	})
}

func TestOwnerAndTokenChecked(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		a, err := lua.Acquire(ctx, rdb, k, "o1", time.Minute, "a1", nil, lua.Tokens{})
		require.NoError(t, err)

		// A second owner is refused and told the holder's remaining TTL.
		busy, err := lua.Acquire(ctx, rdb, k, "o2", time.Minute, "a2", nil, lua.Tokens{})
		require.NoError(t, err)
		require.False(t, busy.OK)
		require.Greater(t, busy.HolderTTL, 50*time.Second)

		for _, c := range []struct {
			owner string
			tok   fence.Token
		}{{"o2", a.Token}, {"o1", a.Token + 1}, {"o1", a.Token - 1}} {
			ok, err := lua.Extend(ctx, rdb, k, c.owner, c.tok, time.Hour)
			require.NoError(t, err)
			require.False(t, ok, "extend by %v", c)
			n, err := lua.Release(ctx, rdb, k, c.owner, c.tok, "x"+c.owner+c.tok.String(), time.Minute, lua.Tokens{})
			require.NoError(t, err)
			require.EqualValues(t, -1, n, "release by %v", c)
		}
		ok, err := lua.Extend(ctx, rdb, k, "o1", a.Token, time.Hour)
		require.NoError(t, err)
		require.True(t, ok)
		assertLeaseShape(t, rdb, k)
		ttl := rdb.PTTL(ctx, k.Lock).Val()
		require.Greater(t, ttl, 59*time.Minute)
	})
}

// Lua numbers are doubles: tokens must survive the round trip through the
// scripts exactly, in every digit, up to the documented 2^53 bound.
func TestLargeTokensExact(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		for _, seed := range []int64{999_999, 1 << 40, 1<<53 - 2} {
			k := keys(t)
			require.NoError(t, rdb.Set(ctx, k.Fence, seed, 0).Err())
			a, err := lua.Acquire(ctx, rdb, k, "o", time.Minute, "r", nil, lua.Tokens{})
			require.NoError(t, err)
			require.Equal(t, fence.Token(seed+1), a.Token)
			st, err := lua.Inspect(ctx, rdb, k)
			require.NoError(t, err)
			require.Equal(t, a.Token, st.Token)
			require.Equal(t, a.Token, st.LastToken)
			n, err := lua.Release(ctx, rdb, k, "o", a.Token, "r", time.Minute, lua.Tokens{})
			require.NoError(t, err)
			require.EqualValues(t, 0, n, "release with the exact token of seed %d", seed)
		}
		k := keys(t)
		require.NoError(t, rdb.Set(ctx, k.Fence, strconv.FormatInt(1<<53-1, 10), 0).Err())
		_, err := lua.Acquire(ctx, rdb, k, "o", time.Minute, "r", nil, lua.Tokens{})
		require.ErrorIs(t, err, lua.ErrOverflow)
		require.Zero(t, rdb.Exists(ctx, k.Lock).Val(), "an overflowing acquire must not take the lock")
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
			{"hash without owner", func(key string) error { return rdb.HSet(ctx, key, "h", "10", "t", "10", "v", "x").Err() }},
			{"hash with a bad token", func(key string) error { return rdb.HSet(ctx, key, "owner", "o", "token", "x", "l:r", "1").Err() }},
			{"hash with no level", func(key string) error { return rdb.HSet(ctx, key, "owner", "o", "token", "1").Err() }},
		} {
			k := keys(t)
			require.NoError(t, plant.set(k.Lock))
			before := snapshot(t, rdb, k.Lock)
			calls := map[string]func() error{
				"acquire": func() error { _, err := lua.Acquire(ctx, rdb, k, "o", time.Minute, "r", nil, lua.Tokens{}); return err },
				"release": func() error { _, err := lua.Release(ctx, rdb, k, "o", 1, "r", time.Minute, lua.Tokens{}); return err },
				"extend":  func() error { _, err := lua.Extend(ctx, rdb, k, "o", 1, time.Minute); return err },
				"abandon": func() error { _, err := lua.Abandon(ctx, rdb, k, "o", "r", nil, lua.Tokens{}); return err },
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
			require.Zero(t, rdb.Exists(ctx, k.Fence).Val(), "nothing may be written when the lock key is foreign")
		}

		for _, bad := range []func(key string) error{
			func(key string) error { return rdb.SAdd(ctx, key, "x").Err() },
			func(key string) error { return rdb.Set(ctx, key, "-5", 0).Err() },
			func(key string) error { return rdb.Set(ctx, key, "abc", 0).Err() },
		} {
			k := keys(t)
			require.NoError(t, bad(k.Fence))
			before := snapshot(t, rdb, k.Fence)
			_, err := lua.Acquire(ctx, rdb, k, "o", time.Minute, "r", nil, lua.Tokens{})
			require.ErrorIs(t, err, lua.ErrForeign)
			require.ErrorContains(t, err, k.Fence)
			require.Zero(t, rdb.Exists(ctx, k.Lock).Val())
			after := snapshot(t, rdb, k.Fence)
			require.Equal(t, before, after)
		}

		k := keys(t)
		require.NoError(t, rdb.Set(ctx, k.TombstoneFor("r"), "junk", 0).Err())
		_, err := lua.Release(ctx, rdb, k, "o", 1, "r", time.Minute, lua.Tokens{})
		require.ErrorIs(t, err, lua.ErrForeign)
		require.ErrorContains(t, err, k.TombstoneFor("r"))
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
		a, err := lua.Acquire(ctx, rdb, k, "o", time.Minute, "r", nil, lua.Tokens{})
		require.NoError(t, err)
		require.True(t, a.OK)
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		n, err := lua.Release(ctx, rdb, k, "o", a.Token, "r", time.Minute, lua.Tokens{})
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

func TestParseRejectsMalformed(t *testing.T) {
	for _, v := range []any{nil, "x", int64(1), []any{int64(1)}, []any{int64(1), int64(0), int64(1)},
		[]any{int64(1), int64(3), int64(0)}, []any{int64(2), int64(3), int64(1)}, []any{int64(0), int64(-3), int64(0)},
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
	for _, v := range []any{nil, []any{}, []any{"o", nil, int64(5), int64(1), []any{"a"}, int64(0)},
		[]any{nil, nil, int64(-9), int64(0), []any{}, int64(0)}, []any{"o", "1", int64(5), int64(1), []any{}, int64(0)},
		[]any{"o", "1", int64(5), "1", []any{"a"}, int64(0)}, []any{"o", "1", int64(5), int64(-1), []any{"a"}, int64(0)},
		[]any{"o", "0", int64(5), int64(1), []any{"a"}, int64(0)}, []any{"o", "1", int64(5), int64(1), []any{int64(1)}, int64(0)},
		[]any{nil, nil, int64(-2), int64(1), []any{"a"}, int64(0)}, []any{"o", "1", int64(5), int64(1), []any{"a"}},
		[]any{"o", "1", int64(5), int64(1), []any{"a"}, int64(-1)}, []any{"o", "1", int64(5), int64(1), []any{"a"}, "1"}} {
		_, err := lua.ParseInspect(v)
		require.True(t, errors.Is(err, lua.ErrReply), "%#v: %v", v, err)
	}
}

func TestAbandonUndoesOnlyThatRequest(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		_, err := lua.Acquire(ctx, rdb, k, "o", time.Minute, "a1", nil, lua.Tokens{})
		require.NoError(t, err)
		undone, err := lua.Abandon(ctx, rdb, k, "o", "a1", nil, lua.Tokens{})
		require.NoError(t, err)
		require.True(t, undone)
		require.Zero(t, rdb.Exists(ctx, k.Lock).Val(), "an abandoned fresh acquisition frees the lock")

		_, err = lua.Acquire(ctx, rdb, k, "o", time.Minute, "a2", nil, lua.Tokens{})
		require.NoError(t, err)
		_, err = lua.Acquire(ctx, rdb, k, "o", time.Minute, "a3", nil, lua.Tokens{})
		require.NoError(t, err)
		for _, c := range []struct{ owner, req string }{{"x", "a3"}, {"o", "nope"}} {
			undone, err = lua.Abandon(ctx, rdb, k, c.owner, c.req, nil, lua.Tokens{})
			require.NoError(t, err)
			require.False(t, undone, "%v: not a level of this owner", c)
		}
		undone, err = lua.Abandon(ctx, rdb, k, "o", "a3", nil, lua.Tokens{})
		require.NoError(t, err)
		require.True(t, undone)
		undone, err = lua.Abandon(ctx, rdb, k, "o", "a3", nil, lua.Tokens{})
		require.NoError(t, err)
		require.False(t, undone, "a repeated abandon must not undo twice")
		_, err = lua.Acquire(ctx, rdb, k, "o", time.Minute, "a4", nil, lua.Tokens{})
		require.NoError(t, err)
		undone, err = lua.Abandon(ctx, rdb, k, "o", "a2", nil, lua.Tokens{})
		require.NoError(t, err)
		require.True(t, undone, "a level is undone by its ID even after later reentries")
		st, err := lua.Inspect(ctx, rdb, k)
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
	s, err := lua.ParseInspect([]any{"o", "1", int64(1 << 62), int64(1), []any{"a"}, int64(0)})
	require.NoError(t, err)
	require.Greater(t, s.TTL, 100*365*24*time.Hour)
}
