package lua_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

func TestQuorumPhases(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		q := func(owner, level string) scripts.QAcquired {
			before := micros(t, rdb)
			a, err := scripts.QAcquire(ctx, rdb, k, joined(t, rdb), &scripts.Request{Owner: owner, TTL: time.Minute, Level: level})
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
		require.Equal(t, scripts.QAcquired{Acquired: scripts.Acquired{OK: true, Token: 0, Depth: 1}, Pending: true}, q("o1", "r1"),
			"a fresh take on an empty node is pending with counter 0")
		require.Equal(t, scripts.QAcquired{Acquired: scripts.Acquired{OK: true, Token: 0, Depth: 1}, Pending: true}, q("o1", "r1"), "a repeat")
		require.False(t, q("o2", "r9").OK, "held pending by another owner")
		require.False(t, raise("o2", "r9", 5), "only the holder raises")
		require.False(t, raise("o1", "rX", 5), "only the holder's level raises")
		require.True(t, raise("o1", "r1", 5))
		require.True(t, raise("o1", "r1", 5), "a repeated raise")
		require.False(t, raise("o1", "r1", 6), "a raised hold is not raised again")
		require.Equal(t, scripts.QAcquired{Acquired: scripts.Acquired{OK: true, Token: 5, Depth: 2}}, q("o1", "r2"), "a reentry keeps the token")

		st, err := scripts.Inspect(ctx, rdb, k)
		require.NoError(t, err)
		require.True(t, st.Held)
		require.EqualValues(t, 5, st.Token)

		// release.lua and extend.lua work per node once t is the token.
		held, err := scripts.Extend(ctx, rdb, k, "o1", 5, time.Minute)
		require.NoError(t, err)
		require.True(t, held)
		require.Equal(t, scripts.Released{Depth: 1}, release(t, rdb, k, "o1", 5, "r2", strict))
		require.Equal(t, scripts.Released{}, release(t, rdb, k, "o1", 5, "r1", strict))
		a := q("o2", "r3")
		require.Equal(t, scripts.QAcquired{Acquired: scripts.Acquired{OK: true, Token: 5, Depth: 1}, Pending: true}, a,
			"the next take reads the counter")
		require.False(t, raise("o2", "r3", 5), "a node never lowers or repeats its counter")
		bumped, err := scripts.QBump(ctx, rdb, k, 12)
		require.NoError(t, err)
		require.False(t, bumped, "a bump never touches a held lock")
		require.True(t, raise("o2", "r3", 9))
		require.Equal(t, scripts.Released{}, release(t, rdb, k, "o2", 9, "r3", strict))
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
		r := &scripts.Request{Owner: "o1", TTL: time.Minute, Level: "r1"}
		_, err := scripts.QAcquire(ctx, rdb, k, joined(t, rdb), r)
		require.NoError(t, err)
		undone, err := scripts.Abandon(ctx, rdb, k, r)
		require.NoError(t, err)
		require.True(t, undone)
		require.Zero(t, rdb.Exists(ctx, k.Lock, k.Counter).Val(), "an undone pending hold leaves nothing")

		// A pending hold that expires leaves the counter where the last
		// raised ownership put it.
		_, err = scripts.QAcquire(ctx, rdb, k, joined(t, rdb), r)
		require.NoError(t, err)
		ok, err := scripts.QRaise(ctx, rdb, k, "o1", "r1", 3, false)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, scripts.Released{}, release(t, rdb, k, "o1", 3, "r1", strict))
		r.Level, r.TTL = "r2", 100*time.Millisecond
		_, err = scripts.QAcquire(ctx, rdb, k, joined(t, rdb), r)
		require.NoError(t, err)
		expire(t, b, k.Lock)
		a, err := scripts.QAcquire(ctx, rdb, k, joined(t, rdb), &scripts.Request{Owner: "o2", TTL: time.Minute, Level: "r3"})
		require.NoError(t, err)
		require.True(t, a.OK && a.Pending)
		require.EqualValues(t, 3, a.Token)
	})
}

func fenceTok(n int) fence.Token { return fence.Token(n) }

// counter is k's strict counter, a Redlock node's.
func counter(t *testing.T, rdb *redis.Client, k scripts.Keys) fence.Token {
	t.Helper()
	v, err := rdb.Get(t.Context(), k.Counter).Uint64()
	require.NoError(t, err)
	return fence.Token(v)
}

// A reentry raises a pending hold to the token its ownership holds
// elsewhere even where the counter already reached that token (held); a
// fresh raise must be above the counter, and no raise goes below it.
func TestQuorumRaiseHeld(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		take := func(level string) {
			a, err := scripts.QAcquire(ctx, rdb, k, joined(t, rdb), &scripts.Request{Owner: "o1", TTL: time.Minute, Level: level})
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
		st, err := scripts.Inspect(ctx, rdb, k)
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
	n := scripts.Node{Joined: scripts.JoinedKey("rflua"), Rejoin: time.Minute}
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
		req := &scripts.Request{Owner: "o", TTL: time.Minute, Level: "r"}
		start := time.Now()
		a, err := scripts.QAcquire(ctx, rdb, k, node, req)
		require.NoError(t, err)
		require.Equal(t, scripts.QAcquired{Acquired: scripts.Acquired{HolderTTL: 300 * time.Millisecond}, Joining: true}, a, "found empty: joining")
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

		// The delay runs on the server's clock: miniredis's is moved, a
		// real one waited for (a ceiling).
		if b.Mini != nil {
			testenv.Advance(b.Mini, 310*time.Millisecond)
		}
		require.True(t, testenv.Await(30*time.Second, func() bool {
			a, err = scripts.QAcquire(ctx, rdb, k, node, req)
			require.NoError(t, err)
			return !a.Joining
		}), "joined once the delay has passed")
		require.True(t, a.OK && a.Pending)

		// A record the library did not write is refused; nothing written.
		other := scripts.Node{Joined: scripts.JoinedKey(testenv.Unique(t) + "x"), Rejoin: time.Second}
		require.NoError(t, rdb.Set(ctx, other.Joined, "soon", 0).Err())
		_, err = scripts.QAcquire(ctx, rdb, keys(t), other, req)
		require.ErrorIs(t, err, scripts.ErrForeign)
		require.Equal(t, "soon", rdb.Get(ctx, other.Joined).Val())
	})
}

// A proposed token is taken where the lock is free, the token is above the
// counter and at most MaxLead from the node's clock, either way: the
// hold is raised at once and the counter is the token. Anywhere else the
// take is pending as without a proposal, and a hold that took a proposal
// the client did not choose is raised from it, never below the counter.
func TestQuorumProposal(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		take := func(k scripts.Keys, owner, level string, p fence.Token) scripts.QAcquired {
			a, err := scripts.QAcquirePropose(ctx, rdb, k, joined(t, rdb), &scripts.Request{Owner: owner, TTL: time.Minute, Level: level}, p)
			require.NoError(t, err)
			return a
		}
		// proposeNow proposes a token 2.5 ms ahead of the node's clock, in
		// the span a node takes (5 ms either way), on name k, again (the
		// pending take abandoned) if the script ran too late for it on a
		// loaded machine.
		proposeNow := func(k scripts.Keys, owner, level string) fence.Token {
			for range 100 {
				p := fence.Token(micros(t, rdb) + 2500)
				a := take(k, owner, level, p)
				if a.Proposed {
					require.Positive(t, a.Micros, "the node's clock")
					a.Micros = 0
					require.Equal(t, scripts.QAcquired{Acquired: scripts.Acquired{OK: true, Token: p, Depth: 1}, Proposed: true}, a)
					return p
				}
				require.True(t, a.OK && a.Pending, "%+v", a)
				require.Greater(t, a.Micros, uint64(p+fence.Token(scripts.MaxLead.Microseconds())), "refused for its clock only")
				_, err := scripts.Abandon(ctx, rdb, k, &scripts.Request{Owner: owner, Level: level})
				require.NoError(t, err)
			}
			t.Fatal("no proposal reached the node within 2.5 ms in 100 tries")
			return 0
		}

		k := keys(t)
		p := proposeNow(k, "o1", "r1")
		require.Equal(t, p, counter(t, rdb, k), "the counter is the token")
		st, err := scripts.Inspect(ctx, rdb, k)
		require.NoError(t, err)
		require.True(t, st.Held && !st.Pending)
		require.Equal(t, p, st.Token)
		require.False(t, take(k, "o2", "r2", p+10).OK, "held by another owner: refused, proposal or not")
		require.Equal(t, scripts.Released{}, release(t, rdb, k, "o1", p, "r1", strict), "released per node like a raised hold")

		// Refused, each for one reason: at the counter; behind the clock;
		// an hour ahead of it.
		a := take(k, "o3", "r3", p)
		require.True(t, a.OK && a.Pending && !a.Proposed, "a proposal at the counter is not taken")
		require.Equal(t, p, a.Token, "the pending reply carries the counter")
		for _, c := range []struct {
			what string
			p    fence.Token
		}{
			{"behind the clock", fence.Token(micros(t, rdb) - uint64(time.Second.Microseconds()))},
			{"an hour ahead", fence.Token(micros(t, rdb) + uint64(time.Hour.Microseconds()))},
		} {
			kc := keys(t)
			a = take(kc, "o1", "r1", c.p)
			require.True(t, a.OK && a.Pending && !a.Proposed, "a proposal %s is not taken", c.what)
			require.Zero(t, rdb.Exists(ctx, kc.Counter).Val(), "no counter raised")
		}

		// A hold that took a proposal the client did not choose.
		kp := keys(t)
		p = proposeNow(kp, "o1", "r1")
		from := func(tok, p fence.Token) bool {
			ok, err := scripts.QRaiseFrom(ctx, rdb, kp, "o1", "r1", tok, p)
			require.NoError(t, err)
			return ok
		}
		require.False(t, from(p+5, p+1), "only from the proposal the hold has")
		require.False(t, from(p-1, p), "never below the counter")
		ok, err := scripts.QRaiseFrom(ctx, rdb, kp, "o2", "r1", p+5, p)
		require.NoError(t, err)
		require.False(t, ok, "only the holder's")
		require.True(t, from(p+5, p))
		require.True(t, from(p+5, p), "a repeated raise")
		require.Equal(t, p+5, counter(t, rdb, kp))
		st, err = scripts.Inspect(ctx, rdb, kp)
		require.NoError(t, err)
		require.Equal(t, p+5, st.Token)

		// "held" raises a lower hold of the ownership (a reentry that met
		// the proposal before its raise), above the counter only.
		kh := keys(t)
		p = proposeNow(kh, "o1", "r1")
		require.Equal(t, p, take(kh, "o1", "r2", fence.None).Token, "a reentry answers the hold's token")
		held := func(tok fence.Token) bool {
			ok, err := scripts.QRaise(ctx, rdb, kh, "o1", "r2", tok, true)
			require.NoError(t, err)
			return ok
		}
		require.False(t, held(p-1), "never below the counter")
		require.True(t, held(p+9))
		require.Equal(t, p+9, counter(t, rdb, kh))

		_, err = scripts.QAcquirePropose(ctx, rdb, keys(t), joined(t, rdb), &scripts.Request{Owner: "o1", TTL: time.Minute, Level: "r1"}, scripts.MaxToken)
		require.ErrorIs(t, err, scripts.ErrOverflow)
	})
}

// A release given a wake channel publishes on it when it frees a lock that
// refused a Redlock attempt, and only then: a node's pollers need no
// command of their own, and a lock nobody waited for costs no PUBLISH.
func TestReleaseWakes(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		for _, mode := range tokenModes {
			m, k := mode.m, keys(t)
			wake := k.Lock + ":w"
			sub := rdb.Subscribe(ctx, wake)
			defer sub.Close()
			_, err := sub.Receive(ctx)
			require.NoError(t, err)
			a := take(t, rdb, k, "o1", "r1", m)
			left, err := scripts.ReleaseWaking(ctx, rdb, k, "o1", a.Token, "r1", m, wake)
			require.NoError(t, err)
			require.Equal(t, scripts.Released{}, left)
			_, err = sub.ReceiveTimeout(ctx, 200*time.Millisecond)
			require.Error(t, err, "%s: nobody was refused, nothing published", mode.name)

			a = take(t, rdb, k, "o1", "r1", m)
			take(t, rdb, k, "o1", "r2", m)
			q, err := scripts.QAcquire(ctx, rdb, k, joined(t, rdb), &scripts.Request{Owner: "o2", TTL: time.Minute, Level: "r9"})
			require.NoError(t, err)
			require.False(t, q.OK, "%s: another owner holds it", mode.name)
			left, err = scripts.ReleaseWaking(ctx, rdb, k, "o1", a.Token, "r2", m, wake)
			require.NoError(t, err)
			require.Equal(t, scripts.Released{Depth: 1}, left, "a level left: nobody woken")
			left, err = scripts.ReleaseWaking(ctx, rdb, k, "o1", a.Token, "r1", m, wake)
			require.NoError(t, err)
			require.Equal(t, scripts.Released{}, left)
			msg, err := sub.ReceiveTimeout(ctx, 30*time.Second)
			require.NoError(t, err)
			require.Equal(t, wake, msg.(*redis.Message).Channel)
			left, err = scripts.ReleaseWaking(ctx, rdb, k, "o1", a.Token, "r1", m, wake)
			require.NoError(t, err)
			require.Equal(t, scripts.Released{Depth: -1, Free: true}, left, "%s: a repeated release frees nothing", mode.name)
			_, err = sub.ReceiveTimeout(ctx, 200*time.Millisecond)
			require.Error(t, err, "%s: one message per freeing release", mode.name)
		}
	})
}
