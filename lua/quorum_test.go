package lua_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/lua"
)

func TestQuorumPhases(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		q := func(owner, level string) scripts.QAcquired {
			before := micros(t, rdb)
			a, err := scripts.QAcquire(ctx, rdb, k, joined(t, rdb), &lua.Request{Owner: owner, TTL: time.Minute, Level: level})
			require.NoError(t, err)
			if a.Pending {
				// The node's clock, for the client's token rule.
				require.GreaterOrEqual(t, a.Micros, before)
				require.LessOrEqual(t, a.Micros, micros(t, rdb))
				a.Micros = 0
			} else {
				require.Zero(t, a.Micros)
			}
			return a
		}
		raise := func(owner, level string, tok int) bool {
			ok, err := scripts.QRaise(ctx, rdb, k, owner, level, fenceTok(tok), false)
			require.NoError(t, err)
			return ok
		}
		require.Equal(t, scripts.QAcquired{Acquired: lua.Acquired{OK: true, Token: 0, Depth: 1}, Pending: true}, q("o1", "r1"),
			"a fresh take on an empty node is pending with counter 0")
		require.Equal(t, scripts.QAcquired{Acquired: lua.Acquired{OK: true, Token: 0, Depth: 1}, Pending: true}, q("o1", "r1"), "a repeat")
		require.False(t, q("o2", "r9").OK, "held pending by another owner")
		require.False(t, raise("o2", "r9", 5), "only the holder raises")
		require.False(t, raise("o1", "rX", 5), "only the holder's level raises")
		require.True(t, raise("o1", "r1", 5))
		require.True(t, raise("o1", "r1", 5), "a repeated raise")
		require.False(t, raise("o1", "r1", 6), "a raised hold is not raised again")
		require.Equal(t, scripts.QAcquired{Acquired: lua.Acquired{OK: true, Token: 5, Depth: 2}}, q("o1", "r2"), "a reentry keeps the token")

		st, err := lua.Inspect(ctx, rdb, k)
		require.NoError(t, err)
		require.True(t, st.Held)
		require.EqualValues(t, 5, st.Token)

		// release.lua and extend.lua work per node once t is the token.
		held, err := lua.Extend(ctx, rdb, k, "o1", 5, time.Minute, lua.Tokens{})
		require.NoError(t, err)
		require.True(t, held)
		for _, lv := range []string{"r2", "r1"} {
			_, err := lua.Release(ctx, rdb, k, "o1", 5, lv, lua.Tokens{})
			require.NoError(t, err)
		}
		a := q("o2", "r3")
		require.Equal(t, scripts.QAcquired{Acquired: lua.Acquired{OK: true, Token: 5, Depth: 1}, Pending: true}, a,
			"the next take reads the counter")
		require.False(t, raise("o2", "r3", 5), "a node never lowers or repeats its counter")
		bumped, err := scripts.QBump(ctx, rdb, k, 12)
		require.NoError(t, err)
		require.False(t, bumped, "a bump never touches a held lock")
		require.True(t, raise("o2", "r3", 9))
		_, err = lua.Release(ctx, rdb, k, "o2", 9, "r3", lua.Tokens{})
		require.NoError(t, err)
		for _, c := range []struct {
			tok  int
			want bool
		}{{8, false}, {12, true}, {12, false}} {
			bumped, err := scripts.QBump(ctx, rdb, k, fenceTok(c.tok))
			require.NoError(t, err)
			require.Equal(t, c.want, bumped, "bump to %d", c.tok)
		}
		a = q("o3", "r4")
		require.EqualValues(t, 12, a.Token, "the next take reads the bumped counter")
	})
}

func TestQuorumPendingUndone(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		r := &lua.Request{Owner: "o1", TTL: time.Minute, Level: "r1"}
		_, err := scripts.QAcquire(ctx, rdb, k, joined(t, rdb), r)
		require.NoError(t, err)
		undone, err := lua.Abandon(ctx, rdb, k, r)
		require.NoError(t, err)
		require.True(t, undone)
		require.Zero(t, rdb.Exists(ctx, k.Lock).Val(), "a pending hold that created the hash leaves nothing")

		// An expired pending hold is not recorded as an ownership. (The
		// ownership before it has a long lease: released, not expired, even
		// on a slow machine.)
		_, err = scripts.QAcquire(ctx, rdb, k, joined(t, rdb), r)
		require.NoError(t, err)
		ok, err := scripts.QRaise(ctx, rdb, k, "o1", "r1", 3, false)
		require.NoError(t, err)
		require.True(t, ok)
		_, err = lua.Release(ctx, rdb, k, "o1", 3, "r1", lua.Tokens{})
		require.NoError(t, err)
		r.Level, r.TTL = "r2", 20*time.Millisecond
		_, err = scripts.QAcquire(ctx, rdb, k, joined(t, rdb), r)
		require.NoError(t, err)
		time.Sleep(50 * time.Millisecond) // TIME is the real clock on miniredis too
		a, err := scripts.QAcquire(ctx, rdb, k, joined(t, rdb), &lua.Request{Owner: "o2", TTL: time.Minute, Level: "r3"})
		require.NoError(t, err)
		require.True(t, a.OK && a.Pending)
		require.EqualValues(t, 3, a.Token)
		st, err := lua.Inspect(ctx, rdb, k)
		require.NoError(t, err)
		for _, e := range st.Ended {
			require.False(t, e.Expired && e.Owner == "o1" && e.Token == 3, "the expired pending hold was recorded as ownership %v", e)
		}
	})
}

func fenceTok(n int) fence.Token { return fence.Token(n) }

// A reentry raises a pending hold to the token its ownership holds
// elsewhere even where the counter already reached that token (held); a
// fresh raise must be above the counter, and no raise goes below it.
func TestQuorumRaiseHeld(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		take := func(level string) {
			a, err := scripts.QAcquire(ctx, rdb, k, joined(t, rdb), &lua.Request{Owner: "o1", TTL: time.Minute, Level: level})
			require.NoError(t, err)
			require.True(t, a.OK && a.Pending)
		}
		raise := func(level string, tok int, held bool) bool {
			ok, err := scripts.QRaise(ctx, rdb, k, "o1", level, fenceTok(tok), held)
			require.NoError(t, err)
			return ok
		}
		take("r1")
		require.True(t, raise("r1", 7, false))
		// The hold goes (an operator deletes the hash); the counter stays 7.
		require.NoError(t, rdb.Del(ctx, k.Lock).Err())
		take("r2")
		require.False(t, raise("r2", 7, false), "a fresh token must be above the counter")
		require.False(t, raise("r2", 6, true), "never below the counter, held or not")
		require.True(t, raise("r2", 7, true), "the ownership's own token, which the counter holds already")
		st, err := lua.Inspect(ctx, rdb, k)
		require.NoError(t, err)
		require.True(t, st.Held && !st.Pending)
		require.EqualValues(t, 7, st.Token)
		c, err := rdb.Get(ctx, k.Counter).Int()
		require.NoError(t, err)
		require.Equal(t, 7, c, "the counter is unchanged")
	})
}

// joined gives rdb, a Redlock node, a join record from long ago: it votes
// at once.
func joined(t *testing.T, rdb *redis.Client) scripts.Node {
	t.Helper()
	n := scripts.Node{Joined: scripts.JoinedKey("rftest"), Rejoin: time.Minute}
	require.NoError(t, rdb.Set(t.Context(), n.Joined, "1", 0).Err())
	return n
}

// A node found without a join record (new, restarted empty, flushed)
// votes for nobody until the rejoin delay has passed since: it may have
// forgotten leases it granted. It writes only the record meanwhile.
func TestJoiningNodeVotesForNobody(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		node := scripts.Node{Joined: scripts.JoinedKey(testenv.Unique(t)), Rejoin: 300 * time.Millisecond}
		req := &lua.Request{Owner: "o", TTL: time.Minute, Level: "r"}
		start := time.Now()
		a, err := scripts.QAcquire(ctx, rdb, k, node, req)
		require.NoError(t, err)
		require.Equal(t, scripts.QAcquired{Acquired: lua.Acquired{HolderTTL: 300 * time.Millisecond}, Joining: true}, a, "found empty: joining")
		require.Zero(t, rdb.Exists(ctx, k.Lock, k.Counter).Val(), "nothing but the record is written")
		since, err := rdb.Get(ctx, node.Joined).Int64()
		require.NoError(t, err)
		require.InDelta(t, micros(t, rdb)/1000, since, 1000, "the record is the node's clock in ms")

		a, err = scripts.QAcquire(ctx, rdb, k, node, req)
		require.NoError(t, err)
		if b.Mini != nil || time.Since(start) < node.Rejoin { // a loaded machine may take longer
			require.True(t, a.Joining, "still joining")
			require.Positive(t, a.HolderTTL)
			require.LessOrEqual(t, a.HolderTTL, 300*time.Millisecond)
			require.Zero(t, rdb.Exists(ctx, k.Lock).Val())
		}

		b.Expire(310 * time.Millisecond) // real time on a real server, the clock on miniredis
		a, err = scripts.QAcquire(ctx, rdb, k, node, req)
		require.NoError(t, err)
		require.False(t, a.Joining, "joined once the delay has passed")
		require.True(t, a.OK && a.Pending)

		// A record the library did not write is refused; nothing written.
		other := scripts.Node{Joined: scripts.JoinedKey(testenv.Unique(t) + "x"), Rejoin: time.Second}
		require.NoError(t, rdb.Set(ctx, other.Joined, "soon", 0).Err())
		_, err = scripts.QAcquire(ctx, rdb, keys(t), other, req)
		require.ErrorIs(t, err, lua.ErrForeign)
		require.Equal(t, "soon", rdb.Get(ctx, other.Joined).Val())
	})
}
