package scripts_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/hashslot"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

// multi.lua takes every name or none: a refused attempt writes nothing on
// the free names (no key, no queue entry, no counter), queues a waiting
// call's entry on the held name only, and that entry is woken, never
// handed the lock, by the release.
func TestMulti(t *testing.T) {
	modes := map[string]scripts.Tokens{"strict": {}, "time": {Time: true, Idle: time.Hour}}
	testenv.EachRedis(t, func(t *testing.T, be testenv.Backend) {
		for mode, tokens := range modes {
			t.Run(mode, func(t *testing.T) {
				ctx := context.Background()
				prefix := "multi:" + testenv.Unique(t)
				a, b, c := scripts.KeysFor(prefix, "a"), scripts.KeysFor(prefix, "b"), scripts.KeysFor(prefix, "c")
				keys := []scripts.Keys{a, b, c}
				counters := func() []string {
					var out []string
					for _, k := range keys {
						for _, key := range []string{k.Counter, k.Floor} {
							out = append(out, be.Client.Get(ctx, key).Val())
						}
					}
					return out
				}
				held, err := scripts.Acquire(ctx, be.Client, b, &scripts.Request{Owner: "other", Level: "hb", TTL: time.Minute, Tokens: tokens})
				require.NoError(t, err)
				require.True(t, held.OK)

				before := counters()
				req := &scripts.MultiRequest{Owner: "me", TTL: time.Minute, Tokens: tokens, Levels: []string{"1", "2", "3"}}
				rep, err := scripts.Multi(ctx, be.Client, keys, req)
				require.NoError(t, err)
				require.False(t, rep.OK)
				require.Equal(t, []int{1}, rep.Blocked)
				require.Greater(t, rep.HolderTTL, 50*time.Second)
				require.Equal(t, before, counters(), "no token spent")
				for _, k := range []scripts.Keys{a, c} {
					require.Zero(t, be.Client.Exists(ctx, k.Lock, k.Queue).Val(), "a refused try leaves no key")
				}
				require.Zero(t, be.Client.Exists(ctx, b.Queue).Val(), "a try does not queue")

				// Waiting: the entry joins b's queue alone, and the release of
				// b wakes it on its channel instead of handing b to it.
				sub := be.Client.Subscribe(ctx, "ch:"+prefix)
				defer sub.Close()
				_, err = sub.Receive(ctx)
				require.NoError(t, err)
				req.Wake = scripts.WakeMember("m1", scripts.Waiter{Channel: "ch:" + prefix})
				req.Queue = time.Minute
				rep, err = scripts.Multi(ctx, be.Client, keys, req)
				require.NoError(t, err)
				require.Equal(t, []int{1}, rep.Blocked)
				require.Equal(t, []string{req.Wake}, be.Client.ZRange(ctx, b.Queue, 0, -1).Val())
				require.Zero(t, be.Client.Exists(ctx, a.Lock, a.Queue, c.Lock, c.Queue).Val())
				left, err := scripts.Release(ctx, be.Client, b, "other", held.Token, "hb", tokens)
				require.NoError(t, err)
				require.EqualValues(t, 0, left.Depth)
				msg, err := sub.ReceiveMessage(ctx)
				require.NoError(t, err)
				require.Equal(t, "*m1 0", msg.Payload)
				st, err := scripts.Inspect(ctx, be.Client, b)
				require.NoError(t, err)
				require.False(t, st.Held, "a LockMulti entry is not handed the lock")

				// An entry an earlier attempt left in a's queue (its name
				// since freed without a release that woke it) leaves with
				// the take.
				require.NoError(t, be.Client.ZAdd(ctx, a.Queue, redis.Z{Score: 1, Member: req.Wake}).Err())
				req.Again = true
				rep, err = scripts.Multi(ctx, be.Client, keys, req)
				require.NoError(t, err)
				require.True(t, rep.OK)
				require.Equal(t, []int64{1, 1, 1}, rep.Depths)
				require.Greater(t, rep.Tokens[1], held.Token, "b's token rises")
				for i, k := range keys {
					st, err := scripts.Inspect(ctx, be.Client, k)
					require.NoError(t, err)
					require.True(t, st.Held)
					require.Equal(t, "me", st.Owner)
					require.Equal(t, rep.Tokens[i], st.Token)
					require.Zero(t, be.Client.ZCard(ctx, k.Queue).Val())
				}
				again, err := scripts.Multi(ctx, be.Client, keys, req)
				require.NoError(t, err)
				require.Equal(t, rep, again, "a repeated attempt is answered as the first")

				// Reentry: held names keep their token and go one deeper;
				// past MaxDepth nothing is written.
				d := scripts.KeysFor(prefix, "d")
				re, err := scripts.Multi(ctx, be.Client, []scripts.Keys{a, d}, &scripts.MultiRequest{Owner: "me", TTL: time.Minute, Tokens: tokens, Levels: []string{"4", "5"}, MaxDepth: 2})
				require.NoError(t, err)
				require.True(t, re.OK)
				require.Equal(t, rep.Tokens[0], re.Tokens[0])
				require.Equal(t, []int64{2, 1}, re.Depths)
				deep, err := scripts.Multi(ctx, be.Client, []scripts.Keys{d, a}, &scripts.MultiRequest{Owner: "me", TTL: time.Minute, Tokens: tokens, Levels: []string{"6", "7"}, MaxDepth: 2})
				require.NoError(t, err)
				require.Equal(t, 1, deep.TooDeep)
				require.Equal(t, []int64{2}, deep.Depths)
				st, err = scripts.Inspect(ctx, be.Client, d)
				require.NoError(t, err)
				require.EqualValues(t, 1, st.Depth, "a refused reentry takes no level elsewhere")
			})
		}
	})
}

// A free name that a Lock call waits for is not taken: it is handed to the
// waiter, and the call is told the name is blocked.
func TestMultiLeavesAWaitedNameToItsWaiter(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, be testenv.Backend) {
		ctx := context.Background()
		prefix := "multi:" + testenv.Unique(t)
		a, b := scripts.KeysFor(prefix, "a"), scripts.KeysFor(prefix, "b")
		held, err := scripts.Acquire(ctx, be.Client, b, &scripts.Request{Owner: "h", Level: "h1", TTL: 200 * time.Millisecond})
		require.NoError(t, err)
		w := &scripts.Request{Owner: "w", Level: "w1", TTL: time.Minute, Waiter: &scripts.Waiter{Channel: "ch:w", Claim: time.Minute, Queue: time.Minute}}
		q, err := scripts.Acquire(ctx, be.Client, b, w)
		require.NoError(t, err)
		require.False(t, q.OK)
		be.Expire(300 * time.Millisecond) // the holder's lease runs out; nobody hands b on yet

		rep, err := scripts.Multi(ctx, be.Client, []scripts.Keys{a, b}, &scripts.MultiRequest{Owner: "me", TTL: time.Minute, Levels: []string{"1", "2"}})
		require.NoError(t, err)
		require.Equal(t, []int{1}, rep.Blocked)
		require.EqualValues(t, -1, rep.HolderTTL)
		st, err := scripts.Inspect(ctx, be.Client, b)
		require.NoError(t, err)
		require.True(t, st.Held)
		require.Equal(t, "w", st.Owner, "handed to the waiting Lock call")
		require.Greater(t, st.Token, held.Token)
		require.Zero(t, be.Client.Exists(ctx, a.Lock).Val())
	})
}

// Names sharing a slot share the time tokens' floor: their tokens rise in
// the script's order, so the floor, written once per name, only rises.
func TestMultiCarriesTheFloor(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, be testenv.Backend) {
		ctx := context.Background()
		prefix := "multi:" + testenv.Unique(t)
		var names []string
		want := hashslot.Of("n0")
		for i := 0; len(names) < 3; i++ {
			if n := "n" + strconv.Itoa(i); hashslot.Of(n) == want {
				names = append(names, n)
			}
		}
		var keys []scripts.Keys
		for _, n := range names {
			keys = append(keys, scripts.KeysFor(prefix, n))
		}
		require.Equal(t, keys[0].Floor, keys[2].Floor)
		// A floor far above the clock: every token comes from it.
		high := fence.Token(time.Now().Add(time.Hour).UnixMicro())
		require.NoError(t, be.Client.Set(ctx, keys[0].Floor, high.String(), time.Hour).Err())
		rep, err := scripts.Multi(ctx, be.Client, keys, &scripts.MultiRequest{Owner: "me", TTL: time.Minute,
			Tokens: scripts.Tokens{Time: true, Idle: time.Hour}, Levels: []string{"1", "2", "3"}})
		require.NoError(t, err)
		require.True(t, rep.OK)
		require.Equal(t, []fence.Token{high + 1, high + 2, high + 3}, rep.Tokens)
		require.Equal(t, fmt.Sprint(high+3), be.Client.Get(ctx, keys[0].Floor).Val())
	})
}

// A release hands the lock to the first Lock call in the queue, past the
// LockMulti entries ahead of it, each of which it wakes: the quick path of
// the release gives way to the general one for that.
func TestReleaseWakesMultiEntriesAndHandsToTheLockCall(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, be testenv.Backend) {
		ctx := context.Background()
		prefix := "multi:" + testenv.Unique(t)
		k := scripts.KeysFor(prefix, "b")
		held, err := scripts.Acquire(ctx, be.Client, k, &scripts.Request{Owner: "h", Level: "h1", TTL: time.Minute})
		require.NoError(t, err)
		sub := be.Client.Subscribe(ctx, "ch:"+prefix)
		defer sub.Close()
		_, err = sub.Receive(ctx)
		require.NoError(t, err)
		wake := scripts.WakeMember("m1", scripts.Waiter{Channel: "ch:" + prefix})
		other := scripts.KeysFor(prefix, "a")
		rep, err := scripts.Multi(ctx, be.Client, []scripts.Keys{other, k}, &scripts.MultiRequest{Owner: "me", TTL: time.Minute,
			Levels: []string{"1", "2"}, Wake: wake, Queue: time.Minute})
		require.NoError(t, err)
		require.Equal(t, []int{1}, rep.Blocked)
		w := &scripts.Request{Owner: "w", Level: "w1", TTL: time.Minute, Waiter: &scripts.Waiter{Channel: "ch:" + prefix, Claim: time.Minute, Queue: time.Minute}}
		q, err := scripts.Acquire(ctx, be.Client, k, w)
		require.NoError(t, err)
		require.False(t, q.OK)
		require.Equal(t, []string{wake}, be.Client.ZRange(ctx, k.Queue, 0, 0).Val(), "the LockMulti entry first")

		_, err = scripts.Release(ctx, be.Client, k, "h", held.Token, "h1", scripts.Tokens{})
		require.NoError(t, err)
		var got []string
		for range 2 {
			msg, err := sub.ReceiveMessage(ctx)
			require.NoError(t, err)
			got = append(got, msg.Payload)
		}
		require.Equal(t, "*m1 0", got[0], "the LockMulti entry woken first")
		require.Regexp(t, `^w1 [1-9][0-9]*$`, got[1], "then the Lock call handed the lock")
		st, err := scripts.Inspect(ctx, be.Client, k)
		require.NoError(t, err)
		require.True(t, st.Held)
		require.Equal(t, "w", st.Owner)
		require.Zero(t, be.Client.ZCard(ctx, k.Queue).Val())
	})
}
