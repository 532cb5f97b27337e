package lua_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

// go-redis retries a call whose reply was lost: each acquire and release
// names its level, so an attempt that finds its work done answers as the
// first did and applies nothing twice.
func TestRepeatedRequestsApplyOnce(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		run := func(level string) scripts.Acquired {
			t.Helper()
			a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o1", TTL: time.Minute, Level: level, Tokens: strict})
			require.NoError(t, err)
			require.Greater(t, rdb.PTTL(ctx, k.Lock).Val(), 59*time.Second, "the hold's expiry is the lease")
			require.Equal(t, time.Duration(-1), rdb.PTTL(ctx, k.Counter).Val(), "the strict counter never expires")
			return a
		}
		first := run("r1")
		require.Equal(t, scripts.Acquired{OK: true, Token: 1, Depth: 1}, first)
		require.Equal(t, first, run("r1"), "a repeated fresh acquire must not take a new token")
		require.Equal(t, scripts.Acquired{OK: true, Token: 1, Depth: 2}, run("r2"))
		require.Equal(t, scripts.Acquired{OK: true, Token: 1, Depth: 2}, run("r2"), "a repeated reentry must not count twice")

		rel := func(level string) scripts.Released {
			t.Helper()
			return release(t, rdb, k, "o1", first.Token, level, strict)
		}
		require.Equal(t, scripts.Released{Depth: 1}, rel("r2"))
		require.Equal(t, scripts.Released{Depth: 1}, rel("r2"), "a repeated partial release must not count twice")
		require.Equal(t, scripts.Released{}, rel("r1"))
		require.Equal(t, scripts.Released{Depth: -1, Free: true}, rel("r1"), "a repeated full release: free, nobody took it since")
		require.Equal(t, scripts.Released{Depth: -1}, release(t, rdb, k, "o1", first.Token+1, "r1", strict), "a token never issued is not held")

		other := take(t, rdb, k, "o2", "r6", strict)
		require.Equal(t, fence.Token(2), other.Token)
		require.Equal(t, scripts.Released{Depth: -1}, rel("r1"), "another ownership began since: not confirmed")
		st := inspect(t, rdb, k)
		require.Equal(t, "o2", st.Owner, "and the retry did not touch it")
		require.Equal(t, []string{"r6"}, st.Levels)
	})
}

// The bug the levels fix: an inner release (depth 2 to 1) whose reply is
// lost is retried by go-redis after the same owner reentered (depth 2
// again); a script that remembered only the last request would apply it
// twice and free a lock one level still relies on.
func TestRetriedPartialReleaseAfterReentryAppliesOnce(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		rdb, k := b.Client, keys(t)
		outer := take(t, rdb, k, "o", "outer", strict)
		take(t, rdb, k, "o", "inner", strict)
		rel := func(level string) scripts.Released {
			t.Helper()
			return release(t, rdb, k, "o", outer.Token, level, strict)
		}
		require.Equal(t, scripts.Released{Depth: 1}, rel("inner"))
		again := take(t, rdb, k, "o", "inner2", strict)
		require.EqualValues(t, 2, again.Depth)
		require.Equal(t, scripts.Released{Depth: 2}, rel("inner"), "the retry of a release already applied changes nothing")
		require.Equal(t, again, take(t, rdb, k, "o", "inner2", strict), "a repeated reentry answers the depth it was granted")
		busy, err := scripts.Acquire(t.Context(), rdb, k, &scripts.Request{Owner: "other", TTL: time.Minute, Level: "x", Tokens: strict})
		require.NoError(t, err)
		require.False(t, busy.OK, "the lock is still held at depth 2")
		require.Equal(t, scripts.Released{Depth: 1}, rel("inner2"))
		require.Equal(t, scripts.Released{}, rel("outer"))
	})
}

func TestAbandonUndoesOnlyThatRequest(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		undo := func(owner, level string) bool {
			t.Helper()
			ok, err := scripts.Abandon(ctx, rdb, k, &scripts.Request{Owner: owner, Level: level, Tokens: strict})
			require.NoError(t, err)
			return ok
		}
		take(t, rdb, k, "o", "a1", strict)
		require.True(t, undo("o", "a1"))
		require.False(t, inspect(t, rdb, k).Held, "an abandoned fresh acquisition frees the lock")

		take(t, rdb, k, "o", "a2", strict)
		take(t, rdb, k, "o", "a3", strict)
		require.False(t, undo("x", "a3"), "not a level of this owner")
		require.False(t, undo("o", "nope"), "not a level of the hold")
		require.True(t, undo("o", "a3"))
		require.False(t, undo("o", "a3"), "a repeated abandon must not undo twice")
		take(t, rdb, k, "o", "a4", strict)
		require.True(t, undo("o", "a2"), "a level is undone by its ID even after later reentries")
		st := inspect(t, rdb, k)
		require.Equal(t, []string{"a4"}, st.Levels)
		require.EqualValues(t, 2, st.Counter, "the counter is never rolled back")
	})
}

// Extending, reentering or renewing never shortens the lease: one level's
// short Extend must not cut the lease another level relies on.
func TestExtendNeverShortens(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Hour, Level: "outer", Tokens: strict})
		require.NoError(t, err)
		ok, err := scripts.Extend(ctx, rdb, k, "o", a.Token, time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		require.Greater(t, inspect(t, rdb, k).TTL, 59*time.Minute, "a shorter extend must not shorten")
		_, err = scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Second, Level: "inner", Tokens: strict})
		require.NoError(t, err)
		require.Greater(t, inspect(t, rdb, k).TTL, 59*time.Minute, "a reentry with a shorter TTL must not shorten")
		ok, err = scripts.Extend(ctx, rdb, k, "o", a.Token, 2*time.Hour)
		require.NoError(t, err)
		require.True(t, ok)
		require.Greater(t, inspect(t, rdb, k).TTL, 119*time.Minute, "a longer extend lengthens")
	})
}

func TestOwnerAndTokenChecked(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		a := take(t, rdb, k, "o1", "a1", strict)
		busy, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o2", TTL: time.Minute, Level: "a2", Tokens: strict})
		require.NoError(t, err)
		require.False(t, busy.OK)
		require.Greater(t, busy.HolderTTL, 50*time.Second, "a second owner is told the holder's remaining lease")

		before := dump(t, b, prefixOf(k))
		for _, c := range []struct {
			owner string
			tok   fence.Token
		}{{"o2", a.Token}, {"o1", a.Token + 1}, {"o1", a.Token - 1}} {
			ok, err := scripts.Extend(ctx, rdb, k, c.owner, c.tok, time.Hour)
			require.NoError(t, err)
			require.False(t, ok, "extend by %v", c)
			require.Equal(t, scripts.Released{Depth: -1}, release(t, rdb, k, c.owner, c.tok, "a1", strict), "release by %v", c)
		}
		unchanged(t, b, before, prefixOf(k), "nothing written")
		ok, err := scripts.Extend(ctx, rdb, k, "o1", a.Token, time.Hour)
		require.NoError(t, err)
		require.True(t, ok)
		require.Greater(t, inspect(t, rdb, k).TTL, 59*time.Minute)
	})
}

// A release whose hold is gone says how it ended, as far as Redis knows:
// -2 (Free) while no token was issued on the counter since, the answer
// of a retry after its first attempt freed the lock, and also of a lease
// that ran out or a hold an operator deleted with nobody taking the name
// since (the client tells these apart by its own lease); -1 once a token
// was issued since, whoever took it and whether or not they released it;
// {-1, by, ms} when a forced unlock ended it, while its record lives.
func TestRetriedReleaseSaysHowTheHoldEnded(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		for _, mode := range tokenModes {
			m := mode.m
			k := keys(t)
			a := take(t, rdb, k, "o1", "l1", m)
			require.Equal(t, scripts.Released{}, release(t, rdb, k, "o1", a.Token, "l1", m), mode.name)
			for range 2 {
				require.Equal(t, scripts.Released{Depth: -1, Free: true}, release(t, rdb, k, "o1", a.Token, "l1", m),
					"%s: a retry while nobody took the name", mode.name)
			}
			other := take(t, rdb, k, "o2", "l2", m)
			require.Equal(t, scripts.Released{Depth: -1}, release(t, rdb, k, "o1", a.Token, "l1", m), "%s: taken since", mode.name)
			require.Equal(t, scripts.Released{}, release(t, rdb, k, "o2", other.Token, "l2", m), mode.name)
			require.Equal(t, scripts.Released{Depth: -1}, release(t, rdb, k, "o1", a.Token, "l1", m), "%s: taken and released since", mode.name)

			k = keys(t)
			a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o1", TTL: 100 * time.Millisecond, Level: "l1", Tokens: m})
			require.NoError(t, err)
			expire(t, b, k.Lock)
			require.Equal(t, scripts.Released{Depth: -1, Free: true}, release(t, rdb, k, "o1", a.Token, "l1", m), "%s: expired", mode.name)
			a = take(t, rdb, k, "o1", "l2", m)
			require.NoError(t, rdb.Del(ctx, k.Lock).Err())
			require.Equal(t, scripts.Released{Depth: -1, Free: true}, release(t, rdb, k, "o1", a.Token, "l2", m), "%s: deleted", mode.name)

			a = take(t, rdb, k, "o1", "l3", m)
			f, err := scripts.Force(ctx, rdb, k, a.Token, "ops@host", m)
			require.NoError(t, err)
			require.True(t, f.Ended)
			forced := inspect(t, rdb, k).Forced
			require.NotNil(t, forced)
			require.Equal(t, a.Token, forced.Token)
			for range 2 {
				require.Equal(t, scripts.Released{Depth: -1, Forced: forced}, release(t, rdb, k, "o1", a.Token, "l3", m),
					"%s: forced, the record says by whom and when", mode.name)
			}
		}

		// The floor is the slot's: a token issued for another name of the
		// slot makes the retry unconfirmed too.
		k := keys(t)
		names, _ := testenv.SameSlot(prefixOf(k), k.Name, 2)
		a := take(t, rdb, k, "o1", "l1", timeTokens)
		require.Equal(t, scripts.Released{}, release(t, rdb, k, "o1", a.Token, "l1", timeTokens))
		takeAndFree(t, rdb, scripts.KeysFor(prefixOf(k), names[1]), timeTokens)
		require.Equal(t, scripts.Released{Depth: -1}, release(t, rdb, k, "o1", a.Token, "l1", timeTokens))
	})
}

// A forced unlock ends the named ownership whoever holds it, hands the
// lock to the oldest waiter with a higher token, records who forced it, and
// is harmless to repeat; the forced holder's release and extend learn it.
func TestForceEndsTheOwnershipAndHandsOn(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		r := newQueueRig(t, b)
		first := r.acquire("o1", "l1", nil)
		require.True(t, first.OK)
		w2 := r.waiter("o2", 5*time.Second)
		require.False(t, r.acquire("o2", "l2", w2).OK)

		before := time.Now()
		f, err := scripts.Force(r.ctx, r.rdb, r.k, first.Token, "ops@host", strict)
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

		again, err := scripts.Force(r.ctx, r.rdb, r.k, first.Token, "ops@host", strict)
		require.NoError(t, err)
		require.Equal(t, scripts.ForceResult{Repeat: true}, again, "a repeat changes nothing")
		require.Equal(t, "o2", r.state().Owner)

		ext, err := scripts.ExtendWhy(r.ctx, r.rdb, r.k, "o1", first.Token, time.Minute)
		require.NoError(t, err)
		require.Equal(t, scripts.ExtendReply{Forced: st.Forced}, ext)
		require.Equal(t, scripts.Released{Depth: -1, Forced: st.Forced}, r.release("o1", first.Token, "l1"))

		other, err := scripts.Force(r.ctx, r.rdb, r.k, st.Token+7, "ops", strict)
		require.NoError(t, err)
		require.Equal(t, scripts.ForceResult{Holder: st.Token}, other, "another token than the holder's: nothing forced")
		require.Equal(t, "o2", r.state().Owner)

		claimed := r.acquire("o2", "l2", w2)
		require.True(t, claimed.OK)
		require.Equal(t, scripts.Released{}, r.release("o2", claimed.Token, "l2"))
		free, err := scripts.Force(r.ctx, r.rdb, r.k, claimed.Token, "ops", strict)
		require.NoError(t, err)
		require.Equal(t, scripts.ForceResult{Holder: fence.None}, free, "a free lock")
	})
}

// Bad arguments are refused before anything is read or written.
func TestForceMalformed(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		a := take(t, rdb, k, "o", "r", strict)
		before := dump(t, b, prefixOf(k))
		_, err := scripts.Force(ctx, rdb, k, a.Token, "two\nlines", strict)
		require.ErrorContains(t, err, "malformed forcer")
		_, err = scripts.Force(ctx, rdb, k, fence.None, "ops", strict)
		require.ErrorContains(t, err, "malformed token")
		unchanged(t, b, before, prefixOf(k))
	})
}

// A release or an undo that hands the lock to a waiter issues the token
// in the caller's mode: with time tokens, the clock or above the floor,
// and above the ending hold's token.
func TestTimeTokensOnHandoff(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		r := newQueueRig(t, b)
		r.tokens = timeTokens
		first := r.acquire("o1", "l1", nil)
		w2, w3 := r.waiter("o2", 5*time.Second), r.waiter("o3", 5*time.Second)
		require.False(t, r.acquire("o2", "l2", w2).OK)
		require.False(t, r.acquire("o3", "l3", w3).OK)

		before := micros(t, r.rdb)
		require.Equal(t, scripts.Released{}, r.release("o1", first.Token, "l1"))
		_, msg := r.message()
		second := r.state().Token
		require.Equal(t, "l2 "+second.String(), msg)
		require.Greater(t, second, first.Token)
		require.GreaterOrEqual(t, uint64(second), before, "the handoff's token is the server's time")
		require.Equal(t, second, r.state().Floor)

		undone, err := scripts.Abandon(r.ctx, r.rdb, r.k, r.request("o2", "l2", w2))
		require.NoError(t, err)
		require.True(t, undone, "o2 gives up before claiming: the undo hands the lock on")
		_, msg = r.message()
		third := r.state().Token
		require.Equal(t, "l3 "+third.String(), msg)
		require.Greater(t, third, second)
		require.Equal(t, third, r.state().Floor)
		require.Equal(t, scripts.Acquired{OK: true, Token: third, Depth: 1}, r.acquire("o3", "l3", w3), "the claim keeps the handed token")
	})
}
