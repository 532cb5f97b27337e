package lua_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
)

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
