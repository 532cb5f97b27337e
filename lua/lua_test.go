package lua_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

var (
	strict     = scripts.NewTokens(false, 0)
	timeTokens = scripts.NewTokens(true, time.Hour)
	// tokenModes lists both modes; a test runs each on keys of its own,
	// since the clients of one prefix must share a mode.
	tokenModes = []struct {
		name string
		m    scripts.Tokens
	}{{"strict", strict}, {"time", timeTokens}}
)

// keys returns a lock's keys under a prefix no other test or call uses:
// a floor is shared by the names of a slot under a prefix, so a shared
// prefix would let one test's time tokens make another's strict take a
// MODE refusal, and its tokens move another's floor.
func keys(t *testing.T) scripts.Keys { return scripts.KeysFor("rflua:"+testenv.Unique(t), "lock") }

// prefixOf returns the prefix k was made under (prefixes hold no brace).
func prefixOf(k scripts.Keys) string { return k.Lock[:strings.Index(k.Lock, ":{")] }

// counterKey is the key that issues m's tokens for k.
func counterKey(k scripts.Keys, m scripts.Tokens) string {
	if m.Time {
		return k.Floor
	}
	return k.Counter
}

// take acquires k for owner at level and fails unless it got the lock.
func take(t *testing.T, rdb *redis.Client, k scripts.Keys, owner, level string, m scripts.Tokens) scripts.Acquired {
	t.Helper()
	a, err := scripts.Acquire(t.Context(), rdb, k, &scripts.Request{Owner: owner, TTL: time.Minute, Level: level, Tokens: m})
	require.NoError(t, err)
	require.True(t, a.OK, "%s takes %s: %+v", owner, k.Name, a)
	return a
}

func release(t *testing.T, rdb *redis.Client, k scripts.Keys, owner string, tok fence.Token, level string, m scripts.Tokens) scripts.Released {
	t.Helper()
	r, err := scripts.Release(t.Context(), rdb, k, owner, tok, level, m)
	require.NoError(t, err)
	return r
}

func inspect(t *testing.T, rdb *redis.Client, k scripts.Keys) scripts.State {
	t.Helper()
	st, err := scripts.Inspect(t.Context(), rdb, k)
	require.NoError(t, err)
	return st
}

// takeAndFree takes the free lock k for a fresh level and releases it,
// returning its token.
func takeAndFree(t *testing.T, rdb *redis.Client, k scripts.Keys, m scripts.Tokens) fence.Token {
	t.Helper()
	level := testenv.Unique(t)
	a := take(t, rdb, k, "o", level, m)
	require.EqualValues(t, 1, a.Depth)
	require.Equal(t, scripts.Released{}, release(t, rdb, k, "o", a.Token, level, m))
	return a.Token
}

// keyState is a key's type and contents, and when it expires
// (PEXPIRETIME, ms; -1 for never).
type keyState struct {
	content  string
	expireAt int64
}

// dump returns every key under prefix, for "nothing written" checks
// (unchanged).
func dump(t *testing.T, b testenv.Backend, prefix string) map[string]keyState {
	t.Helper()
	ctx, rdb := t.Context(), b.Client
	names, err := rdb.Keys(ctx, prefix+":*").Result()
	require.NoError(t, err)
	out := map[string]keyState{}
	for _, key := range names {
		at, err := rdb.Do(ctx, "pexpiretime", key).Int64()
		require.NoError(t, err)
		var content any
		kind := rdb.Type(ctx, key).Val()
		switch kind {
		case "string":
			content = rdb.Get(ctx, key).Val()
		case "hash":
			content = rdb.HGetAll(ctx, key).Val()
		case "zset":
			content = rdb.ZRangeWithScores(ctx, key, 0, -1).Val()
		default:
			content = kind
		}
		out[key] = keyState{fmt.Sprintf("%s %v", kind, content), at}
	}
	return out
}

// unchanged fails unless the keys under prefix are those of before, with
// the same contents and expiries: exactly on a real server; on miniredis,
// whose expiries the test environment moves on in steps of milliseconds
// as the wall clock passes (testenv.Mini), within a second, far less than
// any lease the tests give.
func unchanged(t *testing.T, b testenv.Backend, before map[string]keyState, prefix string, msgAndArgs ...any) {
	t.Helper()
	after := dump(t, b, prefix)
	contents := func(d map[string]keyState) map[string]string {
		out := map[string]string{}
		for k, s := range d {
			out[k] = s.content
		}
		return out
	}
	require.Equal(t, contents(before), contents(after), msgAndArgs...)
	note := ""
	if len(msgAndArgs) > 0 {
		note = fmt.Sprintf(fmt.Sprint(msgAndArgs[0]), msgAndArgs[1:]...)
	}
	for key, s := range before {
		at := after[key].expireAt
		if b.Mini == nil || s.expireAt < 0 || at < 0 {
			require.Equal(t, s.expireAt, at, "%s's expiry: %s", key, note)
		} else {
			require.InDelta(t, s.expireAt, at, 1000, "%s's expiry: %s", key, note)
		}
	}
}

// expire waits until key's expiry removes it: miniredis's clock is moved
// past it, a real server is waited for (a ceiling, not a bound).
func expire(t *testing.T, b testenv.Backend, key string) {
	t.Helper()
	if b.Mini != nil {
		b.Mini.FastForward(b.Mini.TTL(key) + time.Millisecond)
	}
	require.True(t, testenv.Await(30*time.Second, func() bool { return b.Client.Exists(t.Context(), key).Val() == 0 }),
		"%s never expired", key)
}

// lapse ends key's expiry now, as its running out would.
func lapse(t *testing.T, b testenv.Backend, key string) {
	t.Helper()
	require.NoError(t, b.Client.PExpire(t.Context(), key, time.Millisecond).Err())
	expire(t, b, key)
}

// Load puts every script into the server's cache, under the SHA1 the
// wrappers send, and the library where the server has Functions.
func TestLoad(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		require.NoError(t, scripts.Load(ctx, rdb))
		for _, name := range []string{"acquire", "release", "extend", "inspect", "abandon", "qacquire", "qraise", "force", "proclaim", "multi"} {
			ok, err := rdb.ScriptExists(ctx, scripts.Script(name).Hash()).Result()
			require.NoError(t, err)
			require.Equal(t, []bool{true}, ok, name)
		}
		if b.Name == "redis" {
			require.Contains(t, testenv.Libraries(t, rdb), scripts.LibraryName())
		}
	})
}

// Lua numbers are doubles: tokens survive the scripts exactly, in every
// digit, up to 2^53 - 1, in the hold, the counter, the reply and the
// comparison a retried release makes.
func TestLargeTokensExact(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		for _, c := range []struct {
			m    scripts.Tokens
			seed int64
		}{{strict, 999_999}, {strict, 1 << 40}, {strict, 1<<53 - 2}, {timeTokens, 1<<53 - 2}} {
			k := keys(t)
			require.NoError(t, rdb.Set(ctx, counterKey(k, c.m), c.seed, 0).Err())
			a := take(t, rdb, k, "o", "r", c.m)
			require.Equal(t, fence.Token(c.seed+1), a.Token)
			require.Equal(t, fence.Token(c.seed+1).String(), rdb.HGet(ctx, k.Lock, "t").Val())
			require.Equal(t, fence.Token(c.seed+1).String(), rdb.Get(ctx, counterKey(k, c.m)).Val())
			st := inspect(t, rdb, k)
			require.Equal(t, a.Token, st.Token)
			require.Equal(t, a.Token, max(st.Counter, st.Floor))
			require.Equal(t, scripts.Released{}, release(t, rdb, k, "o", a.Token, "r", c.m), "seed %d", c.seed)
			require.Equal(t, scripts.Released{Depth: -1, Free: true}, release(t, rdb, k, "o", a.Token, "r", c.m),
				"seed %d: the retry matches the counter exactly", c.seed)
		}
	})
}

func TestNoScriptFallsBackToEval(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		a := take(t, rdb, k, "o", "r", strict)
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		require.Equal(t, scripts.Released{}, release(t, rdb, k, "o", a.Token, "r", strict))
	})
}

// An operator's DEL of the hold (what unsticks a Redis lock in every
// tutorial) leaves the counter: the next ownership gets a higher token, and
// the deleted ownership, taken since, is gone for its holder.
func TestCounterOutlivesADeletedLock(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		for _, mode := range tokenModes {
			k := keys(t)
			old := take(t, rdb, k, "a", "ra", mode.m)
			require.NoError(t, rdb.Del(ctx, k.Lock).Err())
			next := take(t, rdb, k, "b", "rb", mode.m)
			require.Greater(t, next.Token, old.Token, "%s: a DEL must not reset the counter", mode.name)

			held, err := scripts.Extend(ctx, rdb, k, "a", old.Token, time.Minute)
			require.NoError(t, err)
			require.False(t, held, "%s: the deleted ownership cannot be extended", mode.name)
			require.Equal(t, scripts.Released{Depth: -1}, release(t, rdb, k, "a", old.Token, "ra", mode.m), mode.name)
			require.Equal(t, scripts.Released{}, release(t, rdb, k, "b", next.Token, "rb", mode.m), mode.name)
		}
	})
}

// micros is the server's clock in microseconds, as the scripts read it.
func micros(t *testing.T, rdb *redis.Client) uint64 {
	t.Helper()
	now, err := rdb.Time(t.Context()).Result()
	require.NoError(t, err)
	return uint64(now.UnixMicro())
}

// A time token is the server's clock while the clock is ahead of the
// floor, and rises from one ownership to the next; the floor holds it with
// an expiry, and a floor ahead of the clock wins.
func TestTimeTokensFollowTheServerClock(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		before := micros(t, rdb)
		first := takeAndFree(t, rdb, k, timeTokens)
		require.GreaterOrEqual(t, uint64(first), before, "the token is the server's time at the grant")
		require.LessOrEqual(t, uint64(first), micros(t, rdb))
		require.Equal(t, first.String(), rdb.Get(ctx, k.Floor).Val(), "written to the slot's floor")
		require.Zero(t, rdb.Exists(ctx, k.Counter).Val(), "and to no counter of the name's own")

		last := first
		for range 20 {
			tok := takeAndFree(t, rdb, k, timeTokens)
			require.Greater(t, tok, last, "tokens of successive ownerships rise")
			last = tok
		}
		require.Equal(t, last, inspect(t, rdb, k).Floor)

		// A floor ahead of the clock (a clock stepped back) wins, and keeps
		// an expiry: one set without it gets it back.
		ahead := fence.Token(micros(t, rdb) + uint64(time.Hour.Microseconds()))
		require.NoError(t, rdb.Set(ctx, k.Floor, ahead.String(), 0).Err())
		require.Equal(t, ahead+1, takeAndFree(t, rdb, k, timeTokens))
		require.Greater(t, rdb.PTTL(ctx, k.Floor).Val(), 59*time.Minute)
	})
}

// Tokens stay below 2^53, whether the counter, the floor or the clock
// would take them there; nothing is written then.
func TestTokenOverflowRefused(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		for _, mode := range tokenModes {
			for _, v := range []string{"9007199254740991", "9007199254740992"} {
				k := keys(t)
				require.NoError(t, rdb.Set(ctx, counterKey(k, mode.m), v, time.Hour).Err())
				before := dump(t, b, prefixOf(k))
				_, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "l", Tokens: mode.m})
				require.ErrorIs(t, err, scripts.ErrOverflow, "%s at %s", mode.name, v)
				require.ErrorContains(t, err, counterKey(k, mode.m))
				unchanged(t, b, before, prefixOf(k), "%s at %s: nothing written", mode.name, v)
			}
		}
		// 2^53 µs after 1970 is in 2255; a real server's clock cannot be
		// set from a test (and miniredis's TIME overflows in 2262).
		if b.Mini == nil {
			return
		}
		b.Mini.SetTime(time.Date(2260, 1, 1, 0, 0, 0, 0, time.UTC))
		k := keys(t)
		_, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "l", Tokens: timeTokens})
		require.ErrorIs(t, err, scripts.ErrOverflow)
		require.Empty(t, dump(t, b, prefixOf(k)), "no floor, no hold")
	})
}

// A malformed token mode is refused before anything is read or written.
func TestMalformedTokenModeRefused(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		a := take(t, rdb, k, "o", "l", strict)
		tok := a.Token.String()
		before := dump(t, b, prefixOf(k))
		for _, bad := range []string{"", "x", "-1", "01", "1.5", "1e3", " 1", strings.Repeat("9", 17)} {
			for script, run := range map[string]*redis.Cmd{
				"acquire": scripts.Script("acquire").Run(ctx, rdb, []string{k.Lock, k.Queue, k.Counter, k.Floor}, "p", 60000, "lp", bad),
				"release": scripts.Script("release").Run(ctx, rdb, []string{k.Lock, k.Counter}, "o", tok, "l", bad),
				"abandon": scripts.Script("abandon").Run(ctx, rdb, []string{k.Lock, k.Queue, k.Counter}, "o", "l", "", bad),
				"force":   scripts.Script("force").Run(ctx, rdb, []string{k.Lock, k.Queue, k.Counter, k.Forced}, tok, "ops", bad),
				"multi": scripts.Script("multi").Run(ctx, rdb, []string{k.Lock, k.Queue, k.Counter, k.Floor},
					"p", 60000, bad, "", "", "", "1", "0", "lp"),
			} {
				require.ErrorContains(t, run.Err(), "malformed token mode", "%s %q", script, bad)
			}
			unchanged(t, b, before, prefixOf(k), "%q: nothing written", bad)
		}
	})
}
