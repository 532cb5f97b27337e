package lua_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

// With time tokens a fresh depth-1 hold without metadata is kept as a
// string (lib.lua, "Keys"), the hash's fields in one value with the
// hash's expiry. Every script reads it as that hash; a script that writes
// any other state turns it into the hash first, with its expiry kept; a
// script that writes nothing (Inspect, a refused LockMulti) leaves it a
// string; a value that is not such a hold is foreign.
func TestHoldKeptAsString(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := context.Background(), b.Client
		tokens := scripts.Tokens{Time: true, Idle: time.Hour, Record: 90 * time.Second}
		const lease = 20 * time.Second
		take := func(k scripts.Keys, owner, level string, w *scripts.Waiter, meta string) scripts.Acquired {
			t.Helper()
			a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: owner, TTL: lease, Level: level, Waiter: w, Meta: meta, Tokens: tokens})
			require.NoError(t, err)
			return a
		}
		kind := func(k scripts.Keys) string {
			t.Helper()
			return rdb.Type(ctx, k.Lock).Val()
		}
		// The expiry the take gave the key: the lease and the record time.
		full := (lease + tokens.Record).Milliseconds()
		pttl := func(k scripts.Keys) int64 {
			t.Helper()
			return rdb.PTTL(ctx, k.Lock).Val().Milliseconds()
		}

		t.Run("taken, read and released", func(t *testing.T) {
			k := keys(t)
			a := take(k, "owner with spaces", "l1", nil, "")
			require.True(t, a.OK)
			require.Equal(t, "string", kind(k))
			f, err := testenv.LockFields(ctx, rdb, k.Lock)
			require.NoError(t, err)
			require.Equal(t, "owner with spaces", f["o"])
			require.Equal(t, a.Token.String(), f["t"])
			require.Equal(t, a.Token.String(), f["b"], "a fresh name starts an incarnation")
			require.Equal(t, "1", f["l:l1"])
			require.Len(t, f, 5)
			require.InDelta(t, full, pttl(k), 2000, "the hash's expiry: the lease and the record time")

			st, err := scripts.Inspect(ctx, rdb, k, tokens)
			require.NoError(t, err)
			require.True(t, st.Held)
			require.Equal(t, "owner with spaces", st.Owner)
			require.Equal(t, a.Token, st.Token)
			require.EqualValues(t, 1, st.Depth)
			require.Equal(t, []string{"l1"}, st.Levels)
			require.Equal(t, "string", kind(k), "Inspect writes nothing")

			// Another owner's try is refused and writes nothing: the
			// hold stays a string, its expiry as it was.
			before := pttl(k)
			r, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o2", TTL: lease, Level: "l9", Tokens: tokens})
			require.NoError(t, err)
			require.False(t, r.OK)
			require.InDelta(t, lease.Milliseconds(), r.HolderTTL.Milliseconds(), 2000, "what is left of the holder's lease")
			require.Equal(t, "string", kind(k))
			require.LessOrEqual(t, pttl(k), before)

			n, err := scripts.Release(ctx, rdb, k, "owner with spaces", a.Token, "l1", tokens)
			require.NoError(t, err)
			require.Zero(t, n)
			require.Zero(t, rdb.Exists(ctx, k.Lock).Val(), "stowed")
			st, err = scripts.Inspect(ctx, rdb, k, tokens)
			require.NoError(t, err)
			require.False(t, st.Held)
			require.Equal(t, a.Token, st.LastToken)
			require.Equal(t, "owner with spaces", st.LastOwner)
			n, err = scripts.Release(ctx, rdb, k, "owner with spaces", a.Token, "l1", tokens)
			require.NoError(t, err)
			require.Zero(t, n, "a retried release is answered as the first")

			// The next take continues the incarnation, as a string.
			a2 := take(k, "o2", "l2", nil, "")
			require.Greater(t, a2.Token, a.Token)
			require.Equal(t, a.Token.String(), lockField(t, rdb, k.Lock, "b"))
			require.Equal(t, "string", kind(k))
		})

		t.Run("extended as a string", func(t *testing.T) {
			k := keys(t)
			a := take(k, "o1", "l1", nil, "")
			x := lockField(t, rdb, k.Lock, "x")
			ok, err := scripts.Extend(ctx, rdb, k, "o1", a.Token, 2*lease, tokens)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, "string", kind(k))
			require.Greater(t, lockField(t, rdb, k.Lock, "x"), x)
			require.InDelta(t, (2*lease + tokens.Record).Milliseconds(), pttl(k), 2000, "the new lease and the record time")
			ok, err = scripts.Extend(ctx, rdb, k, "o2", a.Token, 2*lease, tokens)
			require.NoError(t, err)
			require.False(t, ok, "another owner's extend")
			ok, err = scripts.Extend(ctx, rdb, k, "o1", a.Token+1, 2*lease, tokens)
			require.NoError(t, err)
			require.False(t, ok, "another token's extend")
		})

		t.Run("a waiter turns it into the hash, expiry kept", func(t *testing.T) {
			k := keys(t)
			a := take(k, "o1", "l1", nil, "")
			before := pttl(k)
			w := &scripts.Waiter{Channel: "rflua:c:" + testenv.Unique(t), Claim: time.Second, Queue: time.Minute}
			q := take(k, "o2", "l2", w, "")
			require.False(t, q.OK)
			require.Equal(t, "hash", kind(k))
			f := rdb.HGetAll(ctx, k.Lock).Val()
			require.Equal(t, map[string]string{"o": "o1", "t": a.Token.String(), "x": f["x"], "b": a.Token.String(), "l:l1": "1", "q": "1"}, f)
			after := pttl(k)
			require.LessOrEqual(t, after, before)
			require.Greater(t, after, before-2000, "the string's expiry, kept")

			// Its release hands the lock to the waiter.
			n, err := scripts.Release(ctx, rdb, k, "o1", a.Token, "l1", tokens)
			require.NoError(t, err)
			require.Zero(t, n)
			c := take(k, "o2", "l2", w, "")
			require.True(t, c.OK, "the waiter claims the lock handed to it")
			require.Greater(t, c.Token, a.Token)
		})

		t.Run("a reentry turns it into the hash", func(t *testing.T) {
			k := keys(t)
			a := take(k, "o1", "l1", nil, "")
			r := take(k, "o1", "l2", nil, "")
			require.True(t, r.OK)
			require.Equal(t, a.Token, r.Token)
			require.EqualValues(t, 2, r.Depth)
			require.Equal(t, "hash", kind(k))
			for _, l := range []string{"l2", "l1"} {
				_, err := scripts.Release(ctx, rdb, k, "o1", a.Token, l, tokens)
				require.NoError(t, err)
			}
			require.Zero(t, rdb.Exists(ctx, k.Lock).Val(), "stowed")
		})

		t.Run("metadata is kept in the hash", func(t *testing.T) {
			k := keys(t)
			take(k, "o1", "l1", nil, "meta")
			require.Equal(t, "hash", kind(k))
			require.Equal(t, "meta", rdb.HGet(ctx, k.Lock, "m").Val())
		})

		t.Run("the strict mode reads it as its hash", func(t *testing.T) {
			k := keys(t)
			a := take(k, "o1", "l1", nil, "")
			r, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o2", TTL: lease, Level: "l2", Tokens: scripts.Tokens{}})
			require.NoError(t, err)
			require.False(t, r.OK, "held by o1")
			n, err := scripts.Release(ctx, rdb, k, "o1", a.Token, "l1", scripts.Tokens{})
			require.NoError(t, err)
			require.Zero(t, n)
		})

		t.Run("a refused LockMulti leaves it a string", func(t *testing.T) {
			k, other := keys(t), scripts.KeysFor("rflua", testenv.Unique(t)+"-other")
			take(k, "o1", "l1", nil, "")
			before := rdb.Get(ctx, k.Lock).Val()
			reply, err := scripts.Multi(ctx, rdb, []scripts.Keys{other, k}, &scripts.MultiRequest{Owner: "o2", TTL: lease, Tokens: tokens, Levels: []string{"m1", "m2"}})
			require.NoError(t, err)
			require.False(t, reply.OK)
			require.Equal(t, before, rdb.Get(ctx, k.Lock).Val())
			require.Zero(t, rdb.Exists(ctx, other.Lock).Val())
		})

		t.Run("a value that is no hold is foreign", func(t *testing.T) {
			for _, v := range []string{
				"6 100 7 l1 o1",                 // b above t
				"6 100 0 l1 o1",                 // b not canonical
				"6 100 6 l1 ",                   // no owner
				"06 100 6 l1 o1",                // t not canonical
				"12345678901234567 100 6 l1 o1", // t of 17 digits
				"6 100 6",                       // fields missing
			} {
				k := keys(t)
				require.NoError(t, rdb.Set(ctx, k.Lock, v, 0).Err())
				_, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o1", TTL: lease, Level: "l1", Tokens: tokens})
				require.ErrorIs(t, err, scripts.ErrForeign, "%q", v)
				_, err = scripts.Release(ctx, rdb, k, "o1", fence.Token(6), "l1", tokens)
				require.ErrorIs(t, err, scripts.ErrForeign, "%q", v)
				_, err = scripts.Inspect(ctx, rdb, k, tokens)
				require.ErrorIs(t, err, scripts.ErrForeign, "%q", v)
				require.Equal(t, v, rdb.Get(ctx, k.Lock).Val(), "%q: left as it was", v)
			}
		})
	})
}

// A level ID that is empty or has a space cannot be read back from a
// string hold: such a take keeps the hash.
func TestHoldWithAnOddLevelKeepsTheHash(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := context.Background(), b.Client
		for _, level := range []string{"l 1", ""} {
			k := keys(t)
			a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o1", TTL: time.Minute, Level: level, Tokens: timeTokens})
			require.NoError(t, err)
			require.True(t, a.OK)
			require.Equal(t, "hash", rdb.Type(ctx, k.Lock).Val(), "%q", level)
			st, err := scripts.Inspect(ctx, rdb, k, timeTokens)
			require.NoError(t, err)
			require.Equal(t, []string{level}, st.Levels)
			n, err := scripts.Release(ctx, rdb, k, "o1", a.Token, level, timeTokens)
			require.NoError(t, err)
			require.Zero(t, n)
			require.ErrorIs(t, rdb.Get(ctx, k.Lock).Err(), redis.Nil, "%q: stowed", level)
		}
	})
}
