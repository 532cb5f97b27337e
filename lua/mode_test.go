package lua_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

// attempts returns the acquisitions a client in mode m makes on k, each
// run on demand: a TryLock, a Lock (waiting) and a LockMulti of k alone.
func attempts(ctx context.Context, rdb *redis.Client, k scripts.Keys, owner string, m scripts.Tokens) map[string]func() (bool, error) {
	w := &scripts.Waiter{Channel: k.Lock + ":ch:" + owner, Claim: time.Second, Queue: time.Minute}
	acquire := func(w *scripts.Waiter) func() (bool, error) {
		return func() (bool, error) {
			a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: owner, TTL: time.Hour, Level: owner + "-l", Waiter: w, Tokens: m})
			return a.OK, err
		}
	}
	return map[string]func() (bool, error){
		"TryLock": acquire(nil),
		"Lock":    acquire(w),
		"LockMulti": func() (bool, error) {
			r, err := scripts.Multi(ctx, rdb, []scripts.Keys{k}, &scripts.MultiRequest{Owner: owner, TTL: time.Hour, Tokens: m,
				Levels: []string{owner + "-m"}})
			return r.OK, err
		},
	}
}

// refusedForMode checks that every attempt of a client in mode m on k is
// refused with MODE naming key, and writes nothing under k's prefix.
func refusedForMode(t *testing.T, b testenv.Backend, k scripts.Keys, m scripts.Tokens, key string) {
	t.Helper()
	before := dump(t, b, prefixOf(k))
	for what, try := range attempts(t.Context(), b.Client, k, "mixed", m) {
		ok, err := try()
		require.ErrorIs(t, err, scripts.ErrMode, "%s", what)
		require.ErrorContains(t, err, "MODE "+key, "%s", what)
		var rerr redis.Error
		require.True(t, errors.As(err, &rerr), "%s: the server's reply keeps its type", what)
		require.False(t, ok, what)
		unchanged(t, b, before, prefixOf(k), "%s: nothing written", what)
	}
}

// A strict client on a name whose slot has a floor, or a time-token client
// on a name with a strict counter, is refused with MODE and writes nothing,
// whether the name is free or held by the other mode's client.
func TestMixedModesRefused(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		rdb := b.Client

		k := keys(t) // free; a time-token client used it
		takeAndFree(t, rdb, k, timeTokens)
		refusedForMode(t, b, k, strict, k.Floor)
		names, _ := testenv.SameSlot(prefixOf(k), k.Name, 2)
		other := scripts.KeysFor(prefixOf(k), names[1])
		require.Equal(t, k.Floor, other.Floor)
		refusedForMode(t, b, other, strict, k.Floor) // a name never used, whose slot has a floor

		k = keys(t) // free; a strict client used it
		takeAndFree(t, rdb, k, strict)
		refusedForMode(t, b, k, timeTokens, k.Counter)

		for _, mode := range tokenModes {
			k = keys(t) // held by the other mode's client
			against, key := timeTokens, k.Floor
			if mode.m.Time {
				against, key = strict, k.Counter
			}
			h := take(t, rdb, k, "holder", "h", against)
			refusedForMode(t, b, k, mode.m, key)
			st := inspect(t, rdb, k)
			require.Equal(t, "holder", st.Owner, mode.name)
			require.Equal(t, h.Token, st.Token, mode.name)
		}
	})
}

// The defect that made the modes refuse each other: a strict client locks
// and unlocks (token 1); a default (time-token) client locks and unlocks
// (a token of the clock, ~1.7e15); the strict client locks again with a
// long TTL and gets 2, a lower token than the last; and the default
// client, meeting no hold it knows, could take the held lock. Now the
// default client is refused from its first attempt, the strict one's tokens
// keep rising, and nobody else gets the lock while it is held.
func TestMixedModesDefectScenario(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		rdb := b.Client
		k := keys(t)
		first := takeAndFree(t, rdb, k, strict)
		refusedForMode(t, b, k, timeTokens, k.Counter)
		long, err := scripts.Acquire(t.Context(), rdb, k, &scripts.Request{Owner: "strict-a", TTL: time.Hour, Level: "long", Tokens: strict})
		require.NoError(t, err)
		require.True(t, long.OK)
		require.Greater(t, long.Token, first, "never a lower token")
		refusedForMode(t, b, k, timeTokens, k.Counter)
		for what, try := range attempts(t.Context(), rdb, k, "strict-c", strict) {
			ok, err := try()
			require.NoError(t, err, what)
			require.False(t, ok, "%s: one holder at a time", what)
		}
		st := inspect(t, rdb, k)
		require.Equal(t, "strict-a", st.Owner)
		require.Equal(t, long.Token, st.Token)
		require.Equal(t, scripts.Released{}, release(t, rdb, k, "strict-a", long.Token, "long", strict))
		refusedForMode(t, b, k, timeTokens, k.Counter) // the counter never expires, nor lets the modes mix

		// The other order: the time-token client first.
		k = keys(t)
		floor := takeAndFree(t, rdb, k, timeTokens)
		refusedForMode(t, b, k, strict, k.Floor)
		held := take(t, rdb, k, "time-a", "long", timeTokens)
		require.Greater(t, held.Token, floor)
		refusedForMode(t, b, k, strict, k.Floor)
		for what, try := range attempts(t.Context(), rdb, k, "time-c", timeTokens) {
			ok, err := try()
			require.NoError(t, err, what)
			require.False(t, ok, "%s: one holder at a time", what)
		}
		require.Equal(t, "time-a", inspect(t, rdb, k).Owner)
	})
}

// With time tokens the floor keeps tokens rising when the server's clock
// steps back; a handoff's token is above the ending hold's even with the
// floor gone; only a floor lost while the clock is behind lets a token go
// lower (docs/safety.md). miniredis only: a real server's clock cannot be
// stepped from a test.
func TestTimeTokensWhenTheClockStepsBack(t *testing.T) {
	m, rdb := testenv.Mini(t)
	b := testenv.Backend{Name: "miniredis", Client: rdb, Mini: m}
	k := keys(t)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetTime(t0)
	first := takeAndFree(t, rdb, k, timeTokens)
	require.EqualValues(t, t0.UnixMicro(), first)

	m.SetTime(t0.Add(-time.Hour)) // NTP steps the clock back an hour
	require.Equal(t, first+1, takeAndFree(t, rdb, k, timeTokens), "above the floor")
	names, _ := testenv.SameSlot(prefixOf(k), k.Name, 2)
	require.Equal(t, first+2, takeAndFree(t, rdb, scripts.KeysFor(prefixOf(k), names[1]), timeTokens),
		"another name of the slot goes on from the floor")

	r := &queueRig{t: t, ctx: t.Context(), b: b, rdb: rdb, k: k, tokens: timeTokens}
	h := r.acquire("o1", "l1", nil)
	require.Equal(t, first+3, h.Token)
	w := &scripts.Waiter{Channel: "ch", Claim: time.Minute, Queue: time.Minute}
	require.False(t, r.acquire("o2", "l2", w).OK)
	require.NoError(t, rdb.Del(t.Context(), k.Floor).Err())
	require.Equal(t, scripts.Released{}, r.release("o1", h.Token, "l1"))
	handed := r.state()
	require.Equal(t, "o2", handed.Owner)
	require.Equal(t, h.Token+1, handed.Token, "a handoff's token is above the ending hold's, the floor gone")
	require.Equal(t, handed.Token, handed.Floor)
	require.Equal(t, scripts.Released{}, r.release("o2", handed.Token, "l2"))

	m.SetTime(t0.Add(time.Second))
	require.EqualValues(t, t0.Add(time.Second).UnixMicro(), takeAndFree(t, rdb, k, timeTokens), "the clock ahead again")

	require.NoError(t, rdb.Del(t.Context(), k.Floor).Err())
	m.SetTime(t0.Add(-time.Hour))
	require.Equal(t, fence.Token(t0.Add(-time.Hour).UnixMicro()), takeAndFree(t, rdb, k, timeTokens),
		"the floor lost: a fresh token comes from the clock")
}
