package lua_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
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
		for _, name := range []string{"acquire", "release", "extend", "inspect", "abandon", "qacquire", "qraise", "force"} {
			ok, err := rdb.ScriptExists(ctx, scripts.Script(name).Hash()).Result()
			require.NoError(t, err)
			require.Equal(t, []bool{true}, ok, name)
		}
	})
}

func keys(t *testing.T) lua.Keys { return lua.KeysFor("rftest", testenv.Unique(t)) }

// assertLeaseShape checks the invariant after every acquire, reentry and
// extend in strict mode: the lease runs, and neither the hash nor the
// counter expires.
func assertLeaseShape(t *testing.T, rdb *redis.Client, k lua.Keys) {
	t.Helper()
	require.Greater(t, leaseLeft(t, rdb, k), time.Duration(0), "the lease must run")
	ttl, err := rdb.PTTL(t.Context(), k.Lock).Result()
	require.NoError(t, err)
	require.Equal(t, time.Duration(-1), ttl, "the strict hash must never expire")
	ttl, err = rdb.PTTL(t.Context(), k.Counter).Result()
	require.NoError(t, err)
	require.Equal(t, time.Duration(-1), ttl, "the strict counter must never expire")
}

// leaseLeft is what is left of the lease of k, as inspect reads it.
func leaseLeft(t *testing.T, rdb *redis.Client, k lua.Keys) time.Duration {
	t.Helper()
	st, err := lua.Inspect(t.Context(), rdb, k)
	require.NoError(t, err)
	return st.TTL
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
			before := testenv.Snapshot(t, rdb, k.Lock)
			calls := map[string]func() error{
				"acquire": func() error {
					_, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: "r"})
					return err
				},
				"release": func() error { _, err := lua.Release(ctx, rdb, k, "o", 1, "r", lua.Tokens{}); return err },
				"extend":  func() error { _, err := lua.Extend(ctx, rdb, k, "o", 1, time.Minute, lua.Tokens{}); return err },
				"abandon": func() error { _, err := lua.Abandon(ctx, rdb, k, &lua.Request{Owner: "o", Level: "r"}); return err },
				"inspect": func() error { _, err := lua.Inspect(ctx, rdb, k); return err },
				"qacquire": func() error {
					_, err := scripts.QAcquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: "r"})
					return err
				},
				"qraise": func() error { _, err := scripts.QRaise(ctx, rdb, k, "o", "r", 1, false); return err },
			}
			for name, call := range calls {
				err := call()
				require.ErrorIs(t, err, lua.ErrForeign, "%s on a %s", name, plant.what)
				require.ErrorContains(t, err, k.Lock)
				var rerr redis.Error
				require.True(t, errors.As(err, &rerr), "%s on a %s: the server's reply keeps its type", name, plant.what)
			}
			after := testenv.Snapshot(t, rdb, k.Lock)
			require.Equal(t, before, after, "a %s must be left as it was", plant.what)
			require.EqualValues(t, -1, rdb.PTTL(ctx, k.Lock).Val(), "no TTL may be put on a %s", plant.what)
		}
	})
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
