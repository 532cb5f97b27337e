package lua_test

import (
	"errors"
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
		run := func(req string) lua.Acquired {
			a, err := lua.Acquire(ctx, rdb, k, "o1", time.Minute, req)
			require.NoError(t, err)
			assertLeaseShape(t, rdb, k)
			return a
		}
		first := run("r1")
		require.Equal(t, lua.Acquired{OK: true, Token: 1, Depth: 1}, first)
		require.Equal(t, first, run("r1"), "a repeated fresh acquire must not take a new token")
		require.Equal(t, lua.Acquired{OK: true, Token: 1, Depth: 2}, run("r2"))
		require.Equal(t, lua.Acquired{OK: true, Token: 1, Depth: 2}, run("r2"), "a repeated reentry must not count twice")

		rel := func(req string) int64 {
			n, err := lua.Release(ctx, rdb, k, "o1", first.Token, req, time.Minute)
			require.NoError(t, err)
			return n
		}
		require.EqualValues(t, 1, rel("r3"))
		require.EqualValues(t, 1, rel("r3"), "a repeated partial release must not count twice")
		require.EqualValues(t, 0, rel("r4"))
		require.EqualValues(t, 0, rel("r4"), "a repeated full release must still report success")
		require.EqualValues(t, -1, rel("r5"), "a new release of a free lock is not held")

		// Someone else takes the lock; the old full release, repeated, must
		// still answer as before and must not touch the new holder.
		other, err := lua.Acquire(ctx, rdb, k, "o2", time.Minute, "r6")
		require.NoError(t, err)
		require.Equal(t, fence.Token(2), other.Token)
		require.EqualValues(t, 0, rel("r4"))
		// ...even after that other owner fully released in turn: each full
		// release leaves its own tombstone.
		n, err := lua.Release(ctx, rdb, k, "o2", other.Token, "r7", time.Minute)
		require.NoError(t, err)
		require.Zero(t, n)
		require.EqualValues(t, 0, rel("r4"), "a retried release must not be told 'not held' after another owner's release")
		other, err = lua.Acquire(ctx, rdb, k, "o2", time.Minute, "r6b")
		require.NoError(t, err)
		st, err := lua.Inspect(ctx, rdb, k)
		require.NoError(t, err)
		require.Equal(t, "o2", st.Owner)
		require.EqualValues(t, 1, st.Depth)
	})
}

func TestOwnerAndTokenChecked(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		a, err := lua.Acquire(ctx, rdb, k, "o1", time.Minute, "a1")
		require.NoError(t, err)

		// A second owner is refused and told the holder's remaining TTL.
		busy, err := lua.Acquire(ctx, rdb, k, "o2", time.Minute, "a2")
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
			n, err := lua.Release(ctx, rdb, k, c.owner, c.tok, "x"+c.owner+c.tok.String(), time.Minute)
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
			a, err := lua.Acquire(ctx, rdb, k, "o", time.Minute, "r")
			require.NoError(t, err)
			require.Equal(t, fence.Token(seed+1), a.Token)
			st, err := lua.Inspect(ctx, rdb, k)
			require.NoError(t, err)
			require.Equal(t, a.Token, st.Token)
			require.Equal(t, a.Token, st.LastToken)
			n, err := lua.Release(ctx, rdb, k, "o", a.Token, "r2", time.Minute)
			require.NoError(t, err)
			require.EqualValues(t, 0, n, "release with the exact token of seed %d", seed)
		}
		k := keys(t)
		require.NoError(t, rdb.Set(ctx, k.Fence, strconv.FormatInt(1<<53-1, 10), 0).Err())
		_, err := lua.Acquire(ctx, rdb, k, "o", time.Minute, "r")
		require.ErrorIs(t, err, lua.ErrOverflow)
		require.Zero(t, rdb.Exists(ctx, k.Lock).Val(), "an overflowing acquire must not take the lock")
	})
}

func TestForeignValuesNamedAndUntouched(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		k := keys(t)
		require.NoError(t, rdb.Set(ctx, k.Lock, "not a hash", 0).Err())
		_, err := lua.Acquire(ctx, rdb, k, "o", time.Minute, "r")
		require.ErrorIs(t, err, lua.ErrWrongType)
		require.ErrorContains(t, err, k.Lock)
		_, err = lua.Release(ctx, rdb, k, "o", 1, "r", time.Minute)
		require.ErrorIs(t, err, lua.ErrWrongType)
		_, err = lua.Extend(ctx, rdb, k, "o", 1, time.Minute)
		require.ErrorIs(t, err, lua.ErrWrongType)
		_, err = lua.Inspect(ctx, rdb, k)
		require.ErrorIs(t, err, lua.ErrWrongType)
		require.Equal(t, "not a hash", rdb.Get(ctx, k.Lock).Val())
		require.Zero(t, rdb.Exists(ctx, k.Fence).Val(), "nothing may be written when the lock key is foreign")

		k = keys(t)
		require.NoError(t, rdb.SAdd(ctx, k.Fence, "x").Err())
		_, err = lua.Acquire(ctx, rdb, k, "o", time.Minute, "r")
		require.ErrorIs(t, err, lua.ErrWrongType)
		require.ErrorContains(t, err, k.Fence)
		require.Zero(t, rdb.Exists(ctx, k.Lock).Val())
		require.Equal(t, []string{"x"}, rdb.SMembers(ctx, k.Fence).Val())
	})
}

func TestNoScriptFallsBackToEval(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		a, err := lua.Acquire(ctx, rdb, k, "o", time.Minute, "r")
		require.NoError(t, err)
		require.True(t, a.OK)
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		n, err := lua.Release(ctx, rdb, k, "o", a.Token, "r2", time.Minute)
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

func TestReleasePublishes(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		ps := rdb.Subscribe(ctx, k.Channel)
		defer ps.Close()
		_, err := ps.Receive(ctx)
		require.NoError(t, err)
		a, err := lua.Acquire(ctx, rdb, k, "o", time.Minute, "r")
		require.NoError(t, err)
		_, err = lua.Release(ctx, rdb, k, "o", a.Token, "r2", time.Minute)
		require.NoError(t, err)
		select {
		case m := <-ps.Channel():
			require.Equal(t, a.Token.String(), m.Payload)
		case <-time.After(5 * time.Second):
			t.Fatal("no release message")
		}
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
	for _, v := range []any{nil, []any{}, []any{"o", nil, "1", int64(5), "1"}, []any{nil, nil, nil, int64(-9), nil},
		[]any{"o", "1", "0", int64(5), "1"}, []any{"o", "1", "1", int64(5), "x"}} {
		_, err := lua.ParseInspect(v)
		require.True(t, errors.Is(err, lua.ErrReply), "%#v: %v", v, err)
	}
}

func TestAbandonUndoesOnlyThatRequest(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		ps := rdb.Subscribe(ctx, k.Channel)
		defer ps.Close()
		_, err := ps.Receive(ctx)
		require.NoError(t, err)

		_, err = lua.Acquire(ctx, rdb, k, "o", time.Minute, "a1")
		require.NoError(t, err)
		undone, err := lua.Abandon(ctx, rdb, k, "o", "a1")
		require.NoError(t, err)
		require.True(t, undone)
		require.Zero(t, rdb.Exists(ctx, k.Lock).Val(), "an abandoned fresh acquisition frees the lock")
		select {
		case <-ps.Channel():
		case <-time.After(5 * time.Second):
			t.Fatal("abandoning a fresh acquisition must wake waiters")
		}

		_, err = lua.Acquire(ctx, rdb, k, "o", time.Minute, "a2")
		require.NoError(t, err)
		_, err = lua.Acquire(ctx, rdb, k, "o", time.Minute, "a3")
		require.NoError(t, err)
		for _, c := range []struct{ owner, req string }{{"o", "a2"}, {"x", "a3"}, {"o", "nope"}} {
			undone, err = lua.Abandon(ctx, rdb, k, c.owner, c.req)
			require.NoError(t, err)
			require.False(t, undone, "%v: something happened since, or not ours", c)
		}
		undone, err = lua.Abandon(ctx, rdb, k, "o", "a3")
		require.NoError(t, err)
		require.True(t, undone)
		undone, err = lua.Abandon(ctx, rdb, k, "o", "a3")
		require.NoError(t, err)
		require.False(t, undone, "a repeated abandon must not undo twice")
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
	s, err := lua.ParseInspect([]any{"o", "1", "1", int64(1 << 62), "1"})
	require.NoError(t, err)
	require.Greater(t, s.TTL, 100*365*24*time.Hour)
}
