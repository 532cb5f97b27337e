package lua_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

// The planted holds are owner "o", token 5, level "r"; the waiters w1 and
// w2 queue behind them.
const plantedToken = 5

func waiterRequest(owner string) *scripts.Request {
	return &scripts.Request{Owner: owner, TTL: time.Minute, Level: owner + "-l",
		Waiter: &scripts.Waiter{Channel: "ch:" + owner, Claim: time.Second, Queue: time.Minute}}
}

// scriptCalls returns one call of each script on k, in mode m, by the
// planted holder (o, token 5, level r) or, for the waiting ones, by w1.
func scriptCalls(ctx context.Context, rdb *redis.Client, node scripts.Node, k scripts.Keys, m scripts.Tokens) map[string]func() error {
	holder := &scripts.Request{Owner: "o", TTL: time.Minute, Level: "r", Tokens: m}
	waiting := waiterRequest("w1")
	waiting.Tokens = m
	multi := func(r *scripts.Request, wake string) func() error {
		return func() error {
			_, err := scripts.Multi(ctx, rdb, []scripts.Keys{k}, &scripts.MultiRequest{Owner: r.Owner, TTL: time.Minute, Tokens: m,
				Levels: []string{r.Level}, Wake: wake, Queue: time.Minute})
			return err
		}
	}
	acquire := func(r *scripts.Request) func() error {
		return func() error { _, err := scripts.Acquire(ctx, rdb, k, r); return err }
	}
	return map[string]func() error{
		"acquire":         acquire(holder),
		"acquire waiting": acquire(waiting),
		"multi":           multi(holder, ""),
		"multi waiting":   multi(waiterRequest("m1"), scripts.WakeMember("m1", scripts.Waiter{Channel: "ch:m1"})),
		"release":         func() error { _, err := scripts.Release(ctx, rdb, k, "o", plantedToken, "r", m); return err },
		"extend":          func() error { _, err := scripts.Extend(ctx, rdb, k, "o", plantedToken, time.Minute); return err },
		"force":           func() error { _, err := scripts.Force(ctx, rdb, k, plantedToken, "ops", m); return err },
		"abandon":         func() error { _, err := scripts.Abandon(ctx, rdb, k, holder); return err },
		"abandon waiting": func() error { _, err := scripts.Abandon(ctx, rdb, k, waiting); return err },
		"inspect":         func() error { _, err := scripts.Inspect(ctx, rdb, k); return err },
		"proclaim":        func() error { _, err := scripts.Proclaim(ctx, rdb, k, "o", plantedToken, "v"); return err },
		"stamp":           func() error { _, _, err := scripts.Stamp(ctx, rdb, k, plantedToken); return err },
		"qacquire":        func() error { _, err := scripts.QAcquire(ctx, rdb, k, node, holder); return err },
		"qraise":          func() error { _, err := scripts.QRaise(ctx, rdb, k, "o", "r", plantedToken, false); return err },
		"qbump":           func() error { _, err := scripts.QBump(ctx, rdb, k, 9); return err },
	}
}

// foreignCase is a key given a shape the scripts did not write, and the
// calls that read it where it matters.
type foreignCase struct {
	what  string
	plant func(ctx context.Context, rdb *redis.Client, k scripts.Keys) // k's other keys as the scripts would leave them, then the shape
	key   func(k scripts.Keys) string
	want  error // ErrForeign, or ErrOverflow
	modes []scripts.Tokens
	calls []string
}

// checkRefused plants each case on fresh keys and runs its calls: each is
// refused with the case's error naming its key, and nothing under the
// prefix changes, values and expiries.
func checkRefused(t *testing.T, b testenv.Backend, cases []foreignCase) {
	t.Helper()
	ctx, rdb := t.Context(), b.Client
	node := joined(t, rdb)
	for _, c := range cases {
		for _, m := range c.modes {
			k := keys(t)
			c.plant(ctx, rdb, k)
			calls := scriptCalls(ctx, rdb, node, k, m)
			before := dump(t, b, prefixOf(k))
			for _, name := range c.calls {
				call, ok := calls[name]
				require.True(t, ok, name)
				err := call()
				require.ErrorIs(t, err, c.want, "%s (%s, %s)", name, c.what, modeName(m))
				require.ErrorContains(t, err, c.key(k), "%s (%s, %s): the key is named", name, c.what, modeName(m))
				var rerr redis.Error
				require.True(t, errors.As(err, &rerr), "%s (%s): the server's reply keeps its type", name, c.what)
				unchanged(t, b, before, prefixOf(k), "%s (%s, %s): nothing written", name, c.what, modeName(m))
			}
		}
	}
}

var bothModes = []scripts.Tokens{strict, timeTokens}

func modeName(m scripts.Tokens) string {
	if m.Time {
		return "time tokens"
	}
	return "strict"
}

// set returns a plant that writes key's value with an hour's expiry.
func set(key func(scripts.Keys) string, v string) func(context.Context, *redis.Client, scripts.Keys) {
	return func(ctx context.Context, rdb *redis.Client, k scripts.Keys) { rdb.Set(ctx, key(k), v, time.Hour) }
}

// hash returns a plant that writes key as a hash of fields with an hour's
// expiry, after before (when not nil).
func hash(key func(scripts.Keys) string, before func(context.Context, *redis.Client, scripts.Keys), fields ...string) func(context.Context, *redis.Client, scripts.Keys) {
	return func(ctx context.Context, rdb *redis.Client, k scripts.Keys) {
		if before != nil {
			before(ctx, rdb, k)
		}
		rdb.HSet(ctx, key(k), fields)
		rdb.Expire(ctx, key(k), time.Hour)
	}
}

func lockKey(k scripts.Keys) string          { return k.Lock }
func queueKey(k scripts.Keys) string         { return k.Queue }
func strictCounterKey(k scripts.Keys) string { return k.Counter }
func floorKey(k scripts.Keys) string         { return k.Floor }
func forcedKey(k scripts.Keys) string        { return k.Forced }

// The hold, in shapes no script writes, refused by every script that
// reads it.
func TestForeignHoldRefused(t *testing.T) {
	every := []string{"acquire", "acquire waiting", "multi", "multi waiting", "release", "extend", "force", "abandon",
		"abandon waiting", "inspect", "proclaim", "stamp", "qacquire", "qraise", "qbump"}
	needsNumber := []string{"acquire", "multi", "force", "abandon", "inspect", "qacquire", "qraise"}
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		checkRefused(t, b, foreignCases{
			{what: "a string", plant: set(lockKey, "o 5 r"), calls: every},
			{what: "an unknown field", plant: hash(lockKey, nil, "o", "o", "t", "5", "l:r", "1", "x", "1"), calls: every},
			{what: "a flag q not 1", plant: hash(lockKey, nil, "o", "o", "t", "5", "l:r", "1", "q", "0"), calls: every},
			{what: "an empty owner", plant: hash(lockKey, nil, "o", "", "t", "5", "l:r", "1"), calls: every},
			{what: "no owner", plant: hash(lockKey, nil, "t", "5", "l:r", "1"), calls: every},
			{what: "no level", plant: hash(lockKey, nil, "o", "o", "t", "5"), calls: every},
			// Pending holds are a Redlock node's: the single-node takes refuse them.
			{what: "no token", plant: hash(lockKey, nil, "o", "o", "l:r", "1"), calls: []string{"acquire", "acquire waiting", "multi", "multi waiting"}},
			// The flag q makes abandon hand the lock on, above the token.
			{what: "a token with a leading zero", plant: hash(lockKey, nil, "o", "o", "t", "05", "l:r", "1", "q", "1"), calls: needsNumber},
			{what: "a 17-digit token", plant: hash(lockKey, nil, "o", "o", "t", "12345678901234567", "l:r", "1", "q", "1"), calls: needsNumber},
			{what: "a token that is no number", plant: hash(lockKey, nil, "o", "o", "t", "x", "l:r", "1", "q", "1"), calls: needsNumber},
			{what: "a token of 2^53", plant: hash(lockKey, nil, "o", "o", "t", "9007199254740992", "l:r", "1", "q", "1"), calls: needsNumber},
			// Without q abandon has nobody to hand the lock to, and would
			// delete the hold.
			{what: "a token that is no number, no flag q", plant: hash(lockKey, nil, "o", "o", "t", "x", "l:r", "1"), calls: []string{"acquire", "abandon"}},
			// An election term's metadata that proclaim.lua did not write.
			{what: "a term with a 20-digit seq", plant: hash(lockKey, nil, "o", "o", "t", "5", "l:r", "1", "m", "\x1d0 99999999999999999999 v"), calls: []string{"proclaim"}},
			{what: "a term with leading zeros", plant: hash(lockKey, nil, "o", "o", "t", "5", "l:r", "1", "m", "\x1d00 007 v"), calls: []string{"proclaim", "stamp"}},
			{what: "a term without its fields", plant: hash(lockKey, nil, "o", "o", "t", "5", "l:r", "1", "m", "\x1dv"), calls: []string{"proclaim", "stamp"}},
			// Only acquire reads a level's depth as a number; multi and
			// qacquire write a new one over it (reported).
			{what: "a level's depth that is no number", plant: hash(lockKey, nil, "o", "o", "t", "5", "l:r", "x"), calls: []string{"acquire"}},
		}.withKey(lockKey, scripts.ErrForeign, bothModes))
	})
}

type foreignCases []foreignCase

// withKey sets what every case refuses, and in which modes.
func (cs foreignCases) withKey(key func(scripts.Keys) string, want error, modes []scripts.Tokens) []foreignCase {
	for i := range cs {
		cs[i].key, cs[i].want = key, want
		if cs[i].modes == nil {
			cs[i].modes = modes
		}
	}
	return cs
}

// plantHeld writes the hold of o (token 5, level r) with the flag q, and
// two waiters queued behind it.
func plantHeld(ctx context.Context, rdb *redis.Client, k scripts.Keys) {
	rdb.HSet(ctx, k.Lock, "o", "o", "t", "5", "l:r", "1", "q", "1")
	rdb.Expire(ctx, k.Lock, time.Hour)
	rdb.ZAdd(ctx, k.Queue, redis.Z{Score: 1, Member: memberOf(waiterRequest("w1"))}, redis.Z{Score: 2, Member: memberOf(waiterRequest("w2"))})
	rdb.Expire(ctx, k.Queue, time.Hour)
}

// plantHandedToW1 writes the hold of w1 (token 5), at the level of its
// waiting call, with w1's entry still queued ahead of w2's: a handoff
// whose claim w1 gives up (abandon).
func plantHandedToW1(ctx context.Context, rdb *redis.Client, k scripts.Keys) {
	w1 := waiterRequest("w1")
	rdb.HSet(ctx, k.Lock, "o", "w1", "t", "5", "l:"+w1.Level, "1", "q", "1")
	rdb.Expire(ctx, k.Lock, time.Hour)
	rdb.ZAdd(ctx, k.Queue, redis.Z{Score: 1, Member: memberOf(w1)}, redis.Z{Score: 2, Member: memberOf(waiterRequest("w2"))})
	rdb.Expire(ctx, k.Queue, time.Hour)
}

// wakes returns a plant that queues n LockMulti calls' entries, ahead of
// every other entry, after before.
func wakes(n int, before func(context.Context, *redis.Client, scripts.Keys)) func(context.Context, *redis.Client, scripts.Keys) {
	return func(ctx context.Context, rdb *redis.Client, k scripts.Keys) {
		before(ctx, rdb, k)
		for i := range n {
			id := fmt.Sprintf("m%d", i)
			rdb.ZAdd(ctx, k.Queue, redis.Z{Score: float64(i) / 100, Member: scripts.WakeMember(id, scripts.Waiter{Channel: "ch:" + id})})
		}
		rdb.Expire(ctx, k.Queue, time.Hour)
	}
}

// then returns a plant that runs first, then second.
func then(first, second func(context.Context, *redis.Client, scripts.Keys)) func(context.Context, *redis.Client, scripts.Keys) {
	return func(ctx context.Context, rdb *redis.Client, k scripts.Keys) { first(ctx, rdb, k); second(ctx, rdb, k) }
}

// The wait queue, in shapes no script writes.
func TestForeignQueueRefused(t *testing.T) {
	free := []string{"acquire", "acquire waiting", "multi", "multi waiting"}
	handOn := []string{"release", "force", "abandon"}
	// A member no script writes, ahead of a Lock call's: a 20-digit claim
	// time, whose sum with the clock a double would not hold exactly.
	junk := func(member string) func(context.Context, *redis.Client, scripts.Keys) {
		return func(ctx context.Context, rdb *redis.Client, k scripts.Keys) {
			rdb.ZAdd(ctx, k.Queue, redis.Z{Score: 0.5, Member: member})
		}
	}
	lone := func(member string) func(context.Context, *redis.Client, scripts.Keys) {
		return func(ctx context.Context, rdb *redis.Client, k scripts.Keys) {
			rdb.ZAdd(ctx, k.Queue, redis.Z{Score: 1, Member: member})
		}
	}
	long := "l\n12345678901234567890\no2\n\npch"
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		checkRefused(t, b, foreignCases{
			{what: "a string, the name free", plant: set(queueKey, "x"), calls: append(free, "inspect")},
			{what: "a string, the name held", plant: then(plantHeld, func(ctx context.Context, rdb *redis.Client, k scripts.Keys) {
				rdb.Del(ctx, k.Queue)
				rdb.Set(ctx, k.Queue, "x", time.Hour)
			}), calls: append(handOn, "acquire waiting", "multi waiting", "abandon waiting", "inspect")},
			{what: "a member without fields", plant: then(plantHeld, junk("junk")), calls: handOn},
			// A second page of the queue is read before the first is
			// woken and removed.
			{what: "a member without fields behind 16 LockMulti calls", plant: then(plantHeld, wakes(16, junk("junk"))), calls: handOn},
			{what: "a LockMulti call's entry without fields", plant: then(plantHeld, junk("*junk")), calls: handOn},
			{what: "a member with a 20-digit claim time", plant: then(plantHeld, junk(long)), calls: handOn},
			{what: "a lone member without fields, the name free", plant: lone("junk"), calls: free},
			{what: "a lone member with a 20-digit claim time, the name free", plant: lone(long), calls: free},
		}.withKey(queueKey, scripts.ErrForeign, bothModes))
	})
}

// The strict counter, in shapes no script writes, and at the bound.
func TestForeignCounterRefused(t *testing.T) {
	free := []string{"acquire", "multi", "inspect", "qacquire", "qbump"}
	handOn := []string{"release", "force", "abandon"}
	only := []scripts.Tokens{strict}
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		var cases foreignCases
		for _, v := range []string{"abc", "-5", "0x10"} {
			cases = append(cases,
				foreignCase{what: v + ", the name free", plant: set(strictCounterKey, v), calls: free},
				foreignCase{what: v + ", handed on", plant: then(plantHeld, set(strictCounterKey, v)), calls: handOn})
		}
		cases = append(cases,
			foreignCase{what: "a hash", plant: hash(strictCounterKey, nil, "t", "3"), calls: free},
			foreignCase{what: "a hash, handed on", plant: hash(strictCounterKey, plantHeld, "t", "3"), calls: handOn},
			// Beyond 2^53 a counter is no token to read, and its INCR
			// overflows.
			foreignCase{what: "17 digits, read", plant: set(strictCounterKey, "12345678901234567"), calls: []string{"multi", "inspect", "qacquire", "qbump"}})
		cases = append(cases, foreignCase{what: "abc, the name free, a LockMulti call queued", plant: wakes(1, set(strictCounterKey, "abc")),
			calls: []string{"acquire", "acquire waiting"}},
			foreignCase{what: "abc, handed on by a waiter that gives up", plant: then(plantHandedToW1, set(strictCounterKey, "abc")),
				calls: []string{"abandon waiting"}})
		checkRefused(t, b, cases.withKey(strictCounterKey, scripts.ErrForeign, only))

		var overflow foreignCases
		for _, v := range []string{"9007199254740991", "9007199254740992"} {
			overflow = append(overflow,
				foreignCase{what: v + ", the name free", plant: set(strictCounterKey, v), calls: []string{"acquire", "multi"}})
		}
		for _, v := range []string{"9007199254740991", "9007199254740992", "12345678901234567"} {
			overflow = append(overflow,
				foreignCase{what: v + ", handed on", plant: then(plantHeld, set(strictCounterKey, v)), calls: handOn})
		}
		overflow = append(overflow, foreignCase{what: "17 digits, the name free", plant: set(strictCounterKey, "12345678901234567"), calls: []string{"acquire"}})
		checkRefused(t, b, overflow.withKey(strictCounterKey, scripts.ErrOverflow, only))
	})
}

// The time tokens' floor, in shapes no script writes, and at the bound. A
// floor read by SET ... GET is put back as it was, its expiry too.
func TestForeignFloorRefused(t *testing.T) {
	free := []string{"acquire", "multi", "inspect"}
	handOn := []string{"release", "force", "abandon"}
	only := []scripts.Tokens{timeTokens}
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		var cases foreignCases
		for _, v := range []string{"abc", "-5", "0x10", "12345678901234567"} {
			cases = append(cases,
				foreignCase{what: v + ", the name free", plant: set(floorKey, v), calls: free},
				foreignCase{what: v + ", handed on", plant: then(plantHeld, set(floorKey, v)), calls: handOn})
		}
		cases = append(cases,
			foreignCase{what: "a hash", plant: hash(floorKey, nil, "t", "3"), calls: free},
			foreignCase{what: "a hash, handed on", plant: hash(floorKey, plantHeld, "t", "3"), calls: handOn})
		cases = append(cases, foreignCase{what: "abc, the name free, a LockMulti call queued", plant: wakes(1, set(floorKey, "abc")),
			calls: []string{"acquire", "acquire waiting"}},
			foreignCase{what: "abc, handed on by a waiter that gives up", plant: then(plantHandedToW1, set(floorKey, "abc")),
				calls: []string{"abandon waiting"}})
		checkRefused(t, b, cases.withKey(floorKey, scripts.ErrForeign, only))

		var overflow foreignCases
		for _, v := range []string{"9007199254740991", "9007199254740992", "9007199254740993", "9999999999999999"} {
			overflow = append(overflow,
				foreignCase{what: v + ", the name free", plant: set(floorKey, v), calls: []string{"acquire", "multi"}},
				foreignCase{what: v + ", handed on", plant: then(plantHeld, set(floorKey, v)), calls: handOn})
		}
		checkRefused(t, b, overflow.withKey(floorKey, scripts.ErrOverflow, only))
	})
}

// The forced-unlock record, in shapes no script writes, refused by the
// scripts that read it: inspect and force always, release and extend of an
// ownership that does not hold the lock.
func TestForeignForcedRecordRefused(t *testing.T) {
	calls := []string{"inspect", "force", "release", "extend"}
	heldByAnother := func(ctx context.Context, rdb *redis.Client, k scripts.Keys) {
		rdb.HSet(ctx, k.Lock, "o", "x", "t", "9", "l:x", "1")
		rdb.Expire(ctx, k.Lock, time.Hour)
	}
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		var cases foreignCases
		for _, v := range []string{"abc", "5", "5 1", "5 x ops", "05 1 ops", "0 1 ops", "5 012 ops", "5 12345678901234567 ops"} {
			cases = append(cases,
				foreignCase{what: "the name free, " + v, plant: set(forcedKey, v), calls: calls},
				foreignCase{what: "the name held by another, " + v, plant: then(heldByAnother, set(forcedKey, v)), calls: calls})
		}
		cases = append(cases, foreignCase{what: "a hash", plant: hash(forcedKey, nil, "t", "5"), calls: calls})
		checkRefused(t, b, cases.withKey(forcedKey, scripts.ErrForeign, bothModes))
	})
}

// A retried release compares the counter with its token to say "free,
// nobody took it since": a counter in a shape no script writes never
// reads as that, and is left as it was.
func TestRetriedReleaseNeverFreeOnAForeignCounter(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		for _, mode := range tokenModes {
			for _, shape := range []string{"abc", "hash"} {
				k := keys(t)
				a := take(t, rdb, k, "o", "r", mode.m)
				require.Equal(t, scripts.Released{}, release(t, rdb, k, "o", a.Token, "r", mode.m))
				key := counterKey(k, mode.m)
				require.NoError(t, rdb.Del(ctx, key).Err())
				if shape == "hash" {
					require.NoError(t, rdb.HSet(ctx, key, "t", a.Token.String()).Err())
				} else {
					require.NoError(t, rdb.Set(ctx, key, shape, time.Hour).Err())
				}
				before := dump(t, b, prefixOf(k))
				r, err := scripts.Release(ctx, rdb, k, "o", a.Token, "r", mode.m)
				if err != nil {
					require.ErrorIs(t, err, scripts.ErrForeign, "%s, %s", mode.name, shape)
					require.ErrorContains(t, err, key)
				} else {
					require.Equal(t, scripts.Released{Depth: -1}, r, "%s, %s: not confirmed", mode.name, shape)
				}
				unchanged(t, b, before, prefixOf(k), "%s, %s: nothing written", mode.name, shape)
			}
		}
	})
}

// A counter or floor of "0" is below every token: every script reads it as
// absent (INCR makes it 1, as from nothing), none refuses it.
func TestZeroCounterReadsAsAbsent(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		for _, mode := range tokenModes {
			k := keys(t)
			key := counterKey(k, mode.m)
			require.NoError(t, rdb.Set(ctx, key, "0", time.Hour).Err())
			st, err := scripts.Inspect(ctx, rdb, k)
			require.NoError(t, err, mode.name)
			require.Zero(t, st.Counter+st.Floor, "%s: read as absent", mode.name)
			_, err = scripts.Multi(ctx, rdb, []scripts.Keys{k}, &scripts.MultiRequest{Owner: "m", TTL: time.Minute, Tokens: mode.m,
				Levels: []string{"ml"}, Queue: time.Minute})
			require.NoError(t, err, "%s: multi", mode.name)
			a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "r", Tokens: mode.m})
			require.NoError(t, err, mode.name)
			require.False(t, a.OK, "%s: multi holds it", mode.name)

			k = keys(t)
			key = counterKey(k, mode.m)
			require.NoError(t, rdb.Set(ctx, key, "0", time.Hour).Err())
			a = take(t, rdb, k, "o", "r", mode.m)
			require.True(t, a.OK, mode.name)
			if !mode.m.Time {
				require.EqualValues(t, 1, a.Token, "strict: INCR of 0")
			}
			require.Equal(t, a.Token.String(), rdb.Get(ctx, key).Val(), "%s: the token is recorded", mode.name)
			require.Equal(t, scripts.Released{}, release(t, rdb, k, "o", a.Token, "r", mode.m))
			require.Equal(t, scripts.Released{Depth: -1, Free: true}, release(t, rdb, k, "o", a.Token, "r", mode.m), "%s: a retry is confirmed", mode.name)
		}
	})
}
