package lua_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

// Load puts every script into the server's cache, under the SHA1 the
// wrappers send.
func TestLoad(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		require.NoError(t, scripts.Load(ctx, rdb))
		for _, name := range []string{"acquire", "release", "extend", "inspect", "abandon", "qacquire", "qraise", "force"} {
			ok, err := rdb.ScriptExists(ctx, scripts.Script(name).Hash()).Result()
			require.NoError(t, err)
			require.Equal(t, []bool{true}, ok, name)
		}
	})
}

func keys(t *testing.T) scripts.Keys { return scripts.KeysFor("rflua", testenv.Unique(t)) }

// assertLeaseShape checks the invariant after every acquire, reentry and
// extend in strict mode: the lease runs, and neither the hash nor the
// counter expires.
func assertLeaseShape(t *testing.T, rdb *redis.Client, k scripts.Keys) {
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
func leaseLeft(t *testing.T, rdb *redis.Client, k scripts.Keys) time.Duration {
	t.Helper()
	st, err := scripts.Inspect(t.Context(), rdb, k, scripts.Tokens{})
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
			a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "r"})
			require.NoError(t, err)
			require.Equal(t, fence.Token(seed+1), a.Token)
			st, err := scripts.Inspect(ctx, rdb, k, scripts.Tokens{})
			require.NoError(t, err)
			require.Equal(t, a.Token, st.Token)
			require.Equal(t, a.Token, st.LastToken)
			n, err := scripts.Release(ctx, rdb, k, "o", a.Token, "r", scripts.Tokens{})
			require.NoError(t, err)
			require.EqualValues(t, 0, n, "release with the exact token of seed %d", seed)
		}
		k := keys(t)
		require.NoError(t, rdb.HSet(ctx, k.Lock, "t", strconv.FormatInt(1<<53-1, 10)).Err())
		_, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "r"})
		require.ErrorIs(t, err, scripts.ErrOverflow)
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
					_, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "r"})
					return err
				},
				"release": func() error { _, err := scripts.Release(ctx, rdb, k, "o", 1, "r", scripts.Tokens{}); return err },
				"extend":  func() error { _, err := scripts.Extend(ctx, rdb, k, "o", 1, time.Minute, scripts.Tokens{}); return err },
				"abandon": func() error {
					_, err := scripts.Abandon(ctx, rdb, k, &scripts.Request{Owner: "o", Level: "r"})
					return err
				},
				"inspect": func() error { _, err := scripts.Inspect(ctx, rdb, k, scripts.Tokens{}); return err },
				"qacquire": func() error {
					_, err := scripts.QAcquire(ctx, rdb, k, joined(t, rdb), &scripts.Request{Owner: "o", TTL: time.Minute, Level: "r"})
					return err
				},
				"qraise": func() error { _, err := scripts.QRaise(ctx, rdb, k, "o", "r", 1, false); return err },
			}
			for name, call := range calls {
				err := call()
				require.ErrorIs(t, err, scripts.ErrForeign, "%s on a %s", name, plant.what)
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
		a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "r"})
		require.NoError(t, err)
		require.True(t, a.OK)
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		n, err := scripts.Release(ctx, rdb, k, "o", a.Token, "r", scripts.Tokens{})
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

// An operator's DEL of the lock hash (what unsticks a Redis lock in every
// tutorial) leaves the counter: the next ownership gets a higher token, and
// the deleted ownership is gone for its holder, whose release and extend
// say so rather than "released".
func TestCounterOutlivesADeletedLock(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		for _, m := range []scripts.Tokens{{}, timeTokens} {
			old, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "a", TTL: time.Minute, Level: "ra", Tokens: m})
			require.NoError(t, err)
			require.True(t, old.OK)
			require.NoError(t, rdb.Del(ctx, k.Lock).Err())

			next, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "b", TTL: time.Minute, Level: "rb", Tokens: m})
			require.NoError(t, err)
			require.True(t, next.OK)
			require.Greater(t, next.Token, old.Token, "mode %+v: a DEL must not reset the counter", m)

			held, err := scripts.Extend(ctx, rdb, k, "a", old.Token, time.Minute, m)
			require.NoError(t, err)
			require.False(t, held, "the deleted ownership cannot be extended")
			n, err := scripts.Release(ctx, rdb, k, "a", old.Token, "ra", m)
			require.NoError(t, err)
			require.EqualValues(t, -1, n, "the deleted ownership was not released by its holder")

			n, err = scripts.Release(ctx, rdb, k, "b", next.Token, "rb", m)
			require.NoError(t, err)
			require.Zero(t, n)
		}
	})
}

// The counter key is refused like every other key this library keeps when
// it holds something it did not write, by every script that reads it, and
// left as it was.
func TestForeignCounterRefused(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		for _, plant := range []struct {
			what string
			set  func(key string) error
		}{
			{"non-numeric string", func(key string) error { return rdb.Set(ctx, key, "x", 0).Err() }},
			{"negative number", func(key string) error { return rdb.Set(ctx, key, "-3", 0).Err() }},
			{"record whose first token is above its last", func(key string) error { return rdb.Set(ctx, key, "3 4 o", 0).Err() }},
			{"record without an owner", func(key string) error { return rdb.Set(ctx, key, "3 1 ", 0).Err() }},
			{"record with a zero token", func(key string) error { return rdb.Set(ctx, key, "3 0 o", 0).Err() }},
			{"hash", func(key string) error { return rdb.HSet(ctx, key, "t", "3").Err() }},
		} {
			k := keys(t)
			require.NoError(t, plant.set(k.Counter))
			before := testenv.Snapshot(t, rdb, k.Counter)
			calls := map[string]func() error{
				"acquire": func() error {
					_, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "r"})
					return err
				},
				"inspect": func() error { _, err := scripts.Inspect(ctx, rdb, k, scripts.Tokens{}); return err },
				"qacquire": func() error {
					_, err := scripts.QAcquire(ctx, rdb, k, joined(t, rdb), &scripts.Request{Owner: "o", TTL: time.Minute, Level: "r"})
					return err
				},
				"qraise": func() error { _, err := scripts.QBump(ctx, rdb, k, 5); return err },
			}
			for name, call := range calls {
				err := call()
				require.ErrorIs(t, err, scripts.ErrForeign, "%s on a %s", name, plant.what)
				require.ErrorContains(t, err, k.Counter)
				var rerr redis.Error
				require.True(t, errors.As(err, &rerr), "%s: the server's reply keeps its type", name)
			}
			require.Equal(t, before, testenv.Snapshot(t, rdb, k.Counter), "a %s must be left as it was", plant.what)
			require.Zero(t, rdb.Exists(ctx, k.Lock, k.Queue).Val(), "nothing else written beside a %s", plant.what)
		}
	})
}

// A forced unlock ends the named ownership whoever holds it, hands the
// lock to the oldest waiter with a higher token, records who forced it, and
// is harmless to repeat; the forced holder's release and extend find it
// gone.
func TestForceEndsTheOwnershipAndHandsOn(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		r := newQueueRig(t, b.Client)
		first := r.acquire("o1", "l1", nil)
		require.True(t, first.OK)
		w2 := r.waiter("o2", 5*time.Second)
		require.False(t, r.acquire("o2", "l2", w2).OK)

		before := time.Now()
		f, err := scripts.Force(r.ctx, r.rdb, r.k, first.Token, "ops@host", scripts.Tokens{})
		require.NoError(t, err)
		require.Equal(t, scripts.ForceResult{Ended: true}, f)
		ch, msg := r.message()
		require.Equal(t, w2.Channel, ch, "the waiter is told")
		st := r.state()
		require.Equal(t, "o2", st.Owner, "the lock went to the waiter")
		require.Greater(t, st.Token, first.Token)
		require.Equal(t, "l2 "+st.Token.String(), msg)
		require.NotNil(t, st.Forced)
		require.Equal(t, first.Token, st.Forced.Token)
		require.Equal(t, "ops@host", st.Forced.By)
		require.WithinDuration(t, before, st.Forced.At, time.Minute)
		require.Contains(t, st.Ended, scripts.Ended{Token: first.Token, Owner: "o1", Expired: true, Forced: true})

		again, err := scripts.Force(r.ctx, r.rdb, r.k, first.Token, "ops@host", scripts.Tokens{})
		require.NoError(t, err)
		require.Equal(t, scripts.ForceResult{Repeat: true}, again, "a repeat changes nothing")
		require.Equal(t, "o2", r.state().Owner)

		held, err := scripts.Extend(r.ctx, r.rdb, r.k, "o1", first.Token, time.Minute, scripts.Tokens{})
		require.NoError(t, err)
		require.False(t, held)
		require.EqualValues(t, -1, r.release("o1", first.Token, "l1"), "a forced ownership was not released")

		// Another token than the holder's: nothing is forced.
		other, err := scripts.Force(r.ctx, r.rdb, r.k, st.Token+7, "ops", scripts.Tokens{})
		require.NoError(t, err)
		require.Equal(t, scripts.ForceResult{Holder: st.Token}, other)
		require.Equal(t, "o2", r.state().Owner)

		// The waiter claims and releases; a force of a free lock says so.
		claimed := r.acquire("o2", "l2", w2)
		require.True(t, claimed.OK)
		require.Zero(t, r.release("o2", claimed.Token, "l2"))
		free, err := scripts.Force(r.ctx, r.rdb, r.k, claimed.Token, "ops", scripts.Tokens{})
		require.NoError(t, err)
		require.Equal(t, scripts.ForceResult{Holder: fence.None}, free)
	})
}

// Bad arguments are refused before anything is read or written.
func TestForceMalformed(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "r"})
		require.NoError(t, err)
		before := testenv.Snapshot(t, rdb, k.Lock)
		_, err = scripts.Force(ctx, rdb, k, a.Token, "two\nlines", scripts.Tokens{})
		require.ErrorContains(t, err, "malformed forcer")
		_, err = scripts.Force(ctx, rdb, k, fence.None, "ops", scripts.Tokens{})
		require.ErrorContains(t, err, "malformed token")
		require.Equal(t, before, testenv.Snapshot(t, rdb, k.Lock))
	})
}

var timeTokens = scripts.Tokens{Time: true, Idle: time.Hour}

// micros is the server's clock in microseconds, as the scripts read it.
func micros(t *testing.T, rdb *redis.Client) uint64 {
	t.Helper()
	now, err := rdb.Time(t.Context()).Result()
	require.NoError(t, err)
	return uint64(now.UnixMicro())
}

func counter(t *testing.T, rdb *redis.Client, k scripts.Keys) fence.Token {
	t.Helper()
	v, err := rdb.Get(t.Context(), k.Counter).Uint64()
	require.NoError(t, err)
	return fence.Token(v)
}

// floor is the time tokens' floor of k's slot.
func floor(t *testing.T, rdb *redis.Client, k scripts.Keys) fence.Token {
	t.Helper()
	v, err := rdb.Get(t.Context(), k.Floor).Uint64()
	require.NoError(t, err)
	return fence.Token(v)
}

// takeAndFree acquires the free lock k for a fresh owner and releases it,
// returning the token it got.
func takeAndFree(t *testing.T, rdb *redis.Client, k scripts.Keys, m scripts.Tokens) fence.Token {
	t.Helper()
	level := "l" + strconv.FormatInt(time.Now().UnixNano(), 36)
	a, err := scripts.Acquire(t.Context(), rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: level, Tokens: m})
	require.NoError(t, err)
	require.True(t, a.OK)
	require.EqualValues(t, 1, a.Depth)
	n, err := scripts.Release(t.Context(), rdb, k, "o", a.Token, level, m)
	require.NoError(t, err)
	require.Zero(t, n)
	return a.Token
}

// In time mode a fresh token is the server's clock while the clock is
// ahead of the counter, and strictly increases from one ownership to the
// next; the counter holds it, with the idle expiry.
func TestTimeTokensFollowTheServerClock(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		rdb, k := b.Client, keys(t)
		before := micros(t, rdb)
		first := takeAndFree(t, rdb, k, timeTokens)
		after := micros(t, rdb)
		require.GreaterOrEqual(t, uint64(first), before, "the token is the server's time at the grant")
		require.LessOrEqual(t, uint64(first), after)
		require.Equal(t, first, floor(t, rdb, k), "the token is written back to the slot's floor")
		require.Zero(t, rdb.Exists(t.Context(), k.Counter).Val(), "and to no counter of the name's own")
		require.Less(t, uint64(first), uint64(1)<<53)

		last := first
		for range 20 {
			tok := takeAndFree(t, rdb, k, timeTokens)
			require.Greater(t, tok, last, "tokens of successive ownerships strictly increase")
			last = tok
		}
		st, err := scripts.Inspect(t.Context(), rdb, k, timeTokens)
		require.NoError(t, err)
		require.Equal(t, last, st.LastToken)

		// A counter ahead of the clock (a clock that stepped back, or a
		// counter carried over from the strict mode) wins: counter + 1.
		ahead := fence.Token(micros(t, rdb) + uint64(time.Hour.Microseconds()))
		require.NoError(t, rdb.HSet(t.Context(), k.Lock, "t", ahead.String()).Err())
		require.Equal(t, ahead+1, takeAndFree(t, rdb, k, timeTokens))
	})
}

// The counter is what keeps time tokens increasing when the clock steps
// back; once it is lost, only the clock orders them. miniredis's clock is
// set by the test.
//
// miniredis only: the subject is the server's clock stepping back, and a
// real server's clock cannot be stepped from a test.
func TestTimeTokensSurviveAClockStepWhileTheCounterLives(t *testing.T) {
	m, rdb := testenv.Mini(t)
	k := keys(t)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetTime(t0)
	first := takeAndFree(t, rdb, k, timeTokens)
	require.EqualValues(t, t0.UnixMicro(), first)

	m.SetTime(t0.Add(-time.Hour)) // NTP steps the clock back an hour
	require.Equal(t, first+1, takeAndFree(t, rdb, k, timeTokens), "the counter carries tokens over a clock step back")

	m.SetTime(t0.Add(time.Second))
	require.EqualValues(t, t0.Add(time.Second).UnixMicro(), takeAndFree(t, rdb, k, timeTokens), "the clock takes over again once ahead")

	// The lock's hash deleted (an operator's DEL): the floor carries the
	// tokens on, the clock being behind.
	require.NoError(t, rdb.Del(t.Context(), k.Lock).Err())
	after := takeAndFree(t, rdb, k, timeTokens)
	require.Equal(t, t0.Add(time.Second).UnixMicro()+1, int64(after), "the floor outlives a DEL of the lock")

	// The same for another name of the slot: the floor is the slot's.
	names, _ := testenv.SameSlot("rflua", k.Name, 2)
	other := scripts.KeysFor("rflua", names[1])
	require.Equal(t, k.Floor, other.Floor)
	require.Equal(t, after+1, takeAndFree(t, rdb, other, timeTokens), "a name of the slot goes on from the floor")

	// Both the hash and the floor lost while the clock is behind the last
	// token: the one case time tokens go backwards (docs/safety.md).
	require.NoError(t, rdb.Del(t.Context(), k.Lock, k.Floor).Err())
	m.SetTime(t0.Add(-time.Hour))
	require.EqualValues(t, t0.Add(-time.Hour).UnixMicro(), takeAndFree(t, rdb, k, timeTokens))
}

// In time mode a held lock's hash expires its record time after the lease
// ends, refreshed by every write; a clean release stows it (its record
// lives one to two record times in a shared record hash), and the slot's floor its
// idle time after the last token; in the strict mode neither the hash nor
// the name's counter expires, and a strict client's write removes the
// expiry an earlier version's time-mode client set (y).
func TestCounterIdleExpiryOnlyInTimeMode(t *testing.T) {
	next1 := func(t *testing.T, rdb *redis.Client, k scripts.Keys) fence.Token {
		t.Helper()
		tok := takeAndFree(t, rdb, k, scripts.Tokens{})
		require.Equal(t, time.Duration(-2), rdb.PTTL(t.Context(), k.Lock).Val(), "released, a strict hash is compacted")
		require.Equal(t, time.Duration(-1), rdb.PTTL(t.Context(), k.Counter).Val(), "into a counter that never expires")
		return tok
	}
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		pttl := func(key string) time.Duration {
			t.Helper()
			return rdb.PTTL(ctx, key).Val()
		}
		strict := takeAndFree(t, rdb, k, scripts.Tokens{})
		require.EqualValues(t, 1, strict)
		require.Equal(t, time.Duration(-2), pttl(k.Lock), "a strict lock released cleanly keeps no hash (compacted)")
		require.Equal(t, time.Duration(-1), pttl(k.Counter), "and its counter never expires")

		m := scripts.Tokens{Time: true, Idle: time.Hour, Record: 10 * time.Minute}
		timed := takeAndFree(t, rdb, k, m)
		require.Greater(t, timed, strict)
		require.Greater(t, pttl(k.Lock), 10*time.Minute, "a name with a strict counter keeps its hash, for a strict client to go on from")
		require.Equal(t, next1(t, rdb, k), timed+1, "and a strict client does")

		k = keys(t)
		timed = takeAndFree(t, rdb, k, m)
		// Released cleanly, a time-mode lock is stowed: its hash goes, and
		// its record is a field of a shared record hash that lives one to
		// two record times.
		require.Equal(t, time.Duration(-2), pttl(k.Lock), "a time-mode lock released cleanly keeps no hash (stowed)")
		rk := k.Records(m)
		require.Positive(t, rdb.HLen(ctx, rk[0]).Val()+rdb.HLen(ctx, rk[1]).Val(), "the record is in the record hashes of m's record time")
		recTTL := max(pttl(rk[0]), pttl(rk[1]))
		require.Greater(t, recTTL, 9*time.Minute, "its record lives at least the record time")
		require.LessOrEqual(t, recTTL, 20*time.Minute, "and at most twice it")
		require.Greater(t, pttl(k.Floor), 59*time.Minute, "the floor the idle expiry")
		require.LessOrEqual(t, pttl(k.Floor), time.Hour)

		// Held, the hash outlives the lease by the record time, and a
		// reentry or an extend moves it with the lease.
		a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "outer", Tokens: m})
		require.NoError(t, err)
		require.Greater(t, pttl(k.Lock), 10*time.Minute)
		require.LessOrEqual(t, pttl(k.Lock), 11*time.Minute)
		_, err = scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: 10 * time.Minute, Level: "inner", Tokens: m})
		require.NoError(t, err)
		require.Greater(t, pttl(k.Lock), 19*time.Minute, "a reentry moves the expiry with the lease")
		ok, err := scripts.Extend(ctx, rdb, k, "o", a.Token, 30*time.Minute, m)
		require.NoError(t, err)
		require.True(t, ok)
		require.Greater(t, pttl(k.Lock), 39*time.Minute, "an extend moves it too")
		for _, level := range []string{"inner", "outer"} {
			_, err = scripts.Release(ctx, rdb, k, "o", a.Token, level, m)
			require.NoError(t, err)
		}
		require.Equal(t, time.Duration(-2), pttl(k.Lock), "released with more than the record time left, the hash is stowed too")

		// Idle past the expiry, a time-mode name leaves nothing; the next
		// token still comes out above every earlier one, from the clock.
		k = keys(t)
		short := scripts.Tokens{Time: true, Idle: 100 * time.Millisecond}
		last := takeAndFree(t, rdb, k, short)
		b.Expire(250 * time.Millisecond) // the record lives up to two record times (100 ms each)
		rk = k.Records(short)
		require.Zero(t, rdb.Exists(ctx, k.Lock, k.Queue, k.Counter, k.Floor, rk[0], rk[1]).Val(), "an idle hash, its record and its floor expire")
		require.Greater(t, takeAndFree(t, rdb, k, short), last)
	})
}

// A release of an ownership from before the hash was lost is not taken for
// a repeat: in time mode the hash records the first token it issued.
func TestReleaseFromBeforeALostHashIsNotHeld(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		old, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o1", TTL: time.Minute, Level: "r1", Tokens: timeTokens})
		require.NoError(t, err)
		require.NoError(t, rdb.Del(ctx, k.Lock).Err()) // a restart without persistence
		takeAndFree(t, rdb, k, timeTokens)
		n, err := scripts.Release(ctx, rdb, k, "o1", old.Token, "r1", timeTokens)
		require.NoError(t, err)
		require.EqualValues(t, -1, n)
	})
}

// A release or an undo that hands the lock to a waiter issues the token in
// the caller's mode too.
func TestTimeTokensOnHandoff(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		r := newQueueRig(t, b.Client)
		r.tokens = timeTokens
		first := r.acquire("o1", "l1", nil)
		w2, w3 := r.waiter("o2", 5*time.Second), r.waiter("o3", 5*time.Second)
		require.False(t, r.acquire("o2", "l2", w2).OK)
		require.False(t, r.acquire("o3", "l3", w3).OK)

		require.NoError(t, r.rdb.PExpire(r.ctx, r.k.Lock, 10*time.Second).Err())
		before := micros(t, r.rdb)
		require.Zero(t, r.release("o1", first.Token, "l1"))
		_, msg := r.message()
		second := r.state().Token
		require.Equal(t, "l2 "+second.String(), msg)
		require.Greater(t, second, first.Token)
		require.GreaterOrEqual(t, uint64(second), before, "the handoff's token is the server's time")
		require.Equal(t, second, floor(t, r.rdb, r.k))
		require.Greater(t, r.rdb.PTTL(r.ctx, r.k.Lock).Val(), 59*time.Minute, "the handoff refreshes the hash's expiry")

		// o2 gives up before claiming: the undo hands the lock on to o3.
		require.NoError(t, r.rdb.PExpire(r.ctx, r.k.Lock, 10*time.Second).Err())
		undone, err := scripts.Abandon(r.ctx, r.rdb, r.k, &scripts.Request{Owner: "o2", Level: "l2", Waiter: w2, Tokens: r.tokens})
		require.NoError(t, err)
		require.True(t, undone)
		_, msg = r.message()
		third := r.state().Token
		require.Equal(t, "l3 "+third.String(), msg)
		require.Greater(t, third, second)
		require.Equal(t, third, floor(t, r.rdb, r.k))
		require.Greater(t, r.rdb.PTTL(r.ctx, r.k.Lock).Val(), 59*time.Minute)
		require.Equal(t, scripts.Acquired{OK: true, Token: third, Depth: 1}, r.acquire("o3", "l3", w3), "the claim keeps the handed token")
	})
}

// Tokens stay below 2^53 in both modes, whether the counter or the clock
// would take them there; nothing is written then.
func TestTimeTokensOverflowRefused(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		require.NoError(t, rdb.HSet(ctx, k.Lock, "t", "9007199254740991").Err())
		for _, m := range []scripts.Tokens{{}, timeTokens} {
			_, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "l", Tokens: m})
			require.ErrorIs(t, err, scripts.ErrOverflow)
			require.Equal(t, map[string]string{"t": "9007199254740991"}, rdb.HGetAll(ctx, k.Lock).Val())
		}
		// The counter key (strict) or the floor (time) at the bound, the
		// hash gone (an operator's DEL): refused the same, nothing written.
		for _, m := range []scripts.Tokens{{}, timeTokens} {
			k = keys(t)
			key := k.Counter
			if m.Time {
				key = k.Floor
			}
			require.NoError(t, rdb.Set(ctx, key, "9007199254740991", 0).Err())
			_, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "l", Tokens: m})
			require.ErrorIs(t, err, scripts.ErrOverflow)
			require.Zero(t, rdb.Exists(ctx, k.Lock, k.Queue).Val())
			require.Equal(t, "9007199254740991", rdb.Get(ctx, key).Val())
			require.NoError(t, rdb.Del(ctx, key).Err())
		}
		// A clock in 2260 needs miniredis: a real server's clock cannot be
		// set from a test.
		if b.Mini == nil {
			return
		}
		// 2^53 µs after 1970 is in 2255 (and miniredis's TIME overflows in 2262).
		b.Mini.SetTime(time.Date(2260, 1, 1, 0, 0, 0, 0, time.UTC))
		k = keys(t)
		_, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "l", Tokens: timeTokens})
		require.ErrorIs(t, err, scripts.ErrOverflow)
		require.Zero(t, rdb.Exists(ctx, k.Lock).Val())
	})
}

// A malformed token mode is refused before anything is written.
func TestMalformedTokenModeRefused(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "l"})
		require.NoError(t, err)
		for _, bad := range []string{"", "x", "-1", "01", "1.5", "1e3", strings.Repeat("9", 16)} {
			err := scripts.Script("acquire").Run(ctx, rdb, []string{k.Lock, k.Queue, k.Counter}, "p", 60000, "lp", "", 0, bad).Err()
			require.ErrorContains(t, err, "malformed token mode", "acquire %q", bad)
			err = scripts.Script("release").Run(ctx, rdb, []string{k.Lock, k.Queue, k.Counter}, "o", a.Token.String(), "l", bad).Err()
			require.ErrorContains(t, err, "malformed token mode", "release %q", bad)
			err = scripts.Script("abandon").Run(ctx, rdb, []string{k.Lock, k.Queue, k.Counter}, "o", "l", "", bad).Err()
			require.ErrorContains(t, err, "malformed token mode", "abandon %q", bad)
			err = scripts.Script("extend").Run(ctx, rdb, []string{k.Lock}, "o", a.Token.String(), 60000, bad).Err()
			require.ErrorContains(t, err, "malformed token mode", "extend %q", bad)
			st, err := scripts.Inspect(ctx, rdb, k, scripts.Tokens{})
			require.NoError(t, err)
			require.Equal(t, "o", st.Owner, "nothing changed")
			require.Equal(t, []string{"l"}, st.Levels)
		}
	})
}

// A waiting call that joins the queue, or reenters or takes a lock never
// used in an attempt after its first (which may have queued it), uses the
// queue: a queue key of another type is refused before anything is
// written, on the quick path and the general one alike. A first attempt
// that takes or reenters the lock does not read the queue, as TryLock
// does not, and the key is left as it was.
func TestForeignQueueRefusedBeforeAnyWrite(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		w := &scripts.Waiter{Channel: "ch", Claim: time.Second, Queue: time.Minute}
		for _, tc := range []struct {
			holder string // "" for a lock never used
			again  bool
		}{{"", true}, {"o", true}, {"x", false}, {"x", true}} {
			k := keys(t)
			if tc.holder != "" {
				a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: tc.holder, TTL: time.Minute, Level: "r1"})
				require.NoError(t, err)
				require.True(t, a.OK)
			}
			require.NoError(t, rdb.Set(ctx, k.Queue, "not a zset", 0).Err())
			before := testenv.Snapshot(t, rdb, k.Lock) + testenv.Snapshot(t, rdb, k.Counter)
			_, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "r2", Waiter: w, Again: tc.again})
			require.ErrorIs(t, err, scripts.ErrForeign, "%+v", tc)
			require.ErrorContains(t, err, k.Queue)
			require.Equal(t, before, testenv.Snapshot(t, rdb, k.Lock)+testenv.Snapshot(t, rdb, k.Counter),
				"%+v: nothing written", tc)
		}
		for _, holder := range []string{"", "o"} {
			k := keys(t)
			if holder != "" {
				a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: holder, TTL: time.Minute, Level: "r1"})
				require.NoError(t, err)
				require.True(t, a.OK)
			}
			require.NoError(t, rdb.Set(ctx, k.Queue, "not a zset", 0).Err())
			a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "r2", Waiter: w})
			require.NoError(t, err, "holder %q: a first attempt", holder)
			require.True(t, a.OK)
			require.Equal(t, "not a zset", rdb.Get(ctx, k.Queue).Val(), "the foreign key is left as it was")
		}
	})
}

// An acquire that finds the last lease expired and the counter foreign is
// refused before it records the expiry: nothing is written.
func TestForeignCounterRefusedBeforeTheExpiryIsRecorded(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o1", TTL: 50 * time.Millisecond, Level: "r1"})
		require.NoError(t, err)
		require.True(t, a.OK)
		b.Expire(60 * time.Millisecond)
		require.NoError(t, rdb.Set(ctx, k.Counter, "not a counter", 0).Err())
		before := testenv.Snapshot(t, rdb, k.Lock)
		_, err = scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o2", TTL: time.Minute, Level: "r2"})
		require.ErrorIs(t, err, scripts.ErrForeign)
		require.ErrorContains(t, err, k.Counter)
		require.Equal(t, before, testenv.Snapshot(t, rdb, k.Lock), "the expired ownership is not recorded")
	})
}
