package lua_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

// queueRig runs the scripts for one lock with waiters that listen on
// channels of their own.
type queueRig struct {
	t   *testing.T
	ctx context.Context
	b   testenv.Backend
	rdb *redis.Client
	k   scripts.Keys
	ps  *redis.PubSub
	// tokens is the token mode of the rig's calls: strict unless a test
	// sets it before its first call.
	tokens scripts.Tokens
}

func newQueueRig(t *testing.T, b testenv.Backend) *queueRig {
	r := &queueRig{t: t, ctx: t.Context(), b: b, rdb: b.Client, k: keys(t), tokens: strict}
	r.ps = r.rdb.PSubscribe(r.ctx, r.k.Lock+":ch:*")
	t.Cleanup(func() { _ = r.ps.Close() })
	_, err := r.ps.Receive(r.ctx)
	require.NoError(t, err)
	return r
}

func (r *queueRig) waiter(owner string, claim time.Duration) *scripts.Waiter {
	return &scripts.Waiter{Channel: r.k.Lock + ":ch:" + owner, Claim: claim, Queue: time.Minute}
}

func (r *queueRig) request(owner, level string, w *scripts.Waiter) *scripts.Request {
	return &scripts.Request{Owner: owner, TTL: time.Minute, Level: level, Waiter: w, Tokens: r.tokens}
}

func (r *queueRig) acquire(owner, level string, w *scripts.Waiter) scripts.Acquired {
	r.t.Helper()
	a, err := scripts.Acquire(r.ctx, r.rdb, r.k, r.request(owner, level, w))
	require.NoError(r.t, err)
	return a
}

func (r *queueRig) release(owner string, tok fence.Token, level string) scripts.Released {
	r.t.Helper()
	return release(r.t, r.rdb, r.k, owner, tok, level, r.tokens)
}

func (r *queueRig) state() scripts.State {
	r.t.Helper()
	return inspect(r.t, r.rdb, r.k)
}

// message returns the next handoff message, failing the test when none
// comes within 30 s (a ceiling: Redis publishes it inside the script).
func (r *queueRig) message() (channel, payload string) {
	r.t.Helper()
	select {
	case m := <-r.ps.Channel():
		return m.Channel, m.Payload
	case <-time.After(30 * time.Second):
		r.t.Fatal("no handoff message")
		return "", ""
	}
}

// unexpected returns the channel of a message that comes within 300 ms, ""
// when none does: for checking that nothing is sent. A slow machine can
// only make it miss a late one, never see one that was not sent.
func (r *queueRig) unexpected() (channel string) {
	select {
	case m := <-r.ps.Channel():
		return m.Channel
	case <-time.After(300 * time.Millisecond):
		return ""
	}
}

// A full release hands the lock to the oldest waiter, with a new token, and
// tells that waiter alone; the waiter claims it by asking again.
func TestReleaseHandsOffFirstComeFirstServed(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		r := newQueueRig(t, b)
		first := r.acquire("o1", "l1", nil)
		require.Equal(t, scripts.Acquired{OK: true, Token: 1, Depth: 1}, first)
		w2, w3 := r.waiter("o2", 5*time.Second), r.waiter("o3", 5*time.Second)
		require.False(t, r.acquire("o2", "l2", w2).OK)
		require.False(t, r.acquire("o3", "l3", w3).OK)
		require.False(t, r.acquire("o2", "l2", w2).OK, "a waiter polling again")
		require.EqualValues(t, 2, r.state().Waiters, "a poll must not queue twice")

		require.Equal(t, scripts.Released{}, r.release("o1", first.Token, "l1"))
		ch, msg := r.message()
		require.Equal(t, w2.Channel, ch, "only the oldest waiter is told")
		require.Equal(t, "l2 2", msg)
		st := r.state()
		require.Equal(t, "o2", st.Owner, "handed over inside the release")
		require.EqualValues(t, 2, st.Token)
		require.Equal(t, []string{"l2"}, st.Levels)
		require.EqualValues(t, 1, st.Waiters)
		require.LessOrEqual(t, st.TTL, 5*time.Second, "an unclaimed handoff lasts the claim time")

		require.False(t, r.acquire("o4", "l4", nil).OK, "nobody else gets in meanwhile, not even a TryLock")
		require.Equal(t, scripts.Acquired{OK: true, Token: 2, Depth: 1}, r.acquire("o2", "l2", w2), "the claim")
		require.Greater(t, r.state().TTL, 5*time.Second, "a claim raises the lease to the TTL")
		require.Equal(t, scripts.Acquired{OK: true, Token: 2, Depth: 1}, r.acquire("o2", "l2", w2), "a repeated claim")

		require.Equal(t, scripts.Released{}, r.release("o2", 2, "l2"))
		ch, msg = r.message()
		require.Equal(t, w3.Channel, ch)
		require.Equal(t, "l3 3", msg)
		require.Equal(t, scripts.Acquired{OK: true, Token: 3, Depth: 1}, r.acquire("o3", "l3", w3))
		require.Equal(t, scripts.Released{}, r.release("o3", 3, "l3"))
		require.Empty(t, r.unexpected(), "no waiter, no message")
		require.Equal(t, map[string]string{r.k.Counter: "3"}, values(t, b, prefixOf(r.k)),
			"a free name with nobody queued leaves its counter alone")
	})
}

// values returns every key under prefix with its string value ("" for
// another type).
func values(t *testing.T, b testenv.Backend, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, key := range b.Client.Keys(t.Context(), prefix+":*").Val() {
		out[key] = b.Client.Get(t.Context(), key).Val()
	}
	return out
}

// TryLock never jumps the queue: a free lock that others wait for is
// handed to the oldest of them instead. Reentry never queues.
func TestQueueOrderHolds(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		r := newQueueRig(t, b)
		w1 := r.waiter("o1", 5*time.Second)
		require.Equal(t, scripts.Acquired{OK: true, Token: 1, Depth: 1}, r.acquire("o1", "l1", w1), "a waiter that finds it free takes it at once")
		require.Equal(t, scripts.Acquired{OK: true, Token: 1, Depth: 2}, r.acquire("o1", "l1b", w1), "reentry with a waiter")
		require.Zero(t, r.state().Waiters, "reentry never queues")

		w2 := r.waiter("o2", 5*time.Second)
		require.False(t, r.acquire("o2", "l2", w2).OK)
		lapse(t, b, r.k.Lock) // the holder's lease runs out without a release
		require.False(t, r.acquire("o3", "l3", nil).OK, "TryLock must not take a lock someone waits for")
		st := r.state()
		require.Equal(t, "o2", st.Owner, "the TryLock handed the free lock to the waiter")
		require.EqualValues(t, 2, st.Token)
		ch, msg := r.message()
		require.Equal(t, w2.Channel, ch)
		require.Equal(t, "l2 2", msg)
	})
}

// A waiter that never claims (it died, or missed its message) holds the
// lock up for its claim time only; the next waiter's poll takes it then.
func TestUnclaimedHandoffPassesOn(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		r := newQueueRig(t, b)
		first := r.acquire("o1", "l1", nil)
		dead, next := r.waiter("o2", 5*time.Second), r.waiter("o3", 5*time.Second)
		require.False(t, r.acquire("o2", "l2", dead).OK)
		require.False(t, r.acquire("o3", "l3", next).OK)
		require.Equal(t, scripts.Released{}, r.release("o1", first.Token, "l1"))
		require.Equal(t, "o2", r.state().Owner)
		require.False(t, r.acquire("o3", "l3", next).OK, "within the claim time the handoff stands")
		lapse(t, b, r.k.Lock) // the claim time runs out
		require.Equal(t, scripts.Acquired{OK: true, Token: 3, Depth: 1}, r.acquire("o3", "l3", next),
			"past the claim time the next waiter takes it, with a new token")
		require.Zero(t, r.state().Waiters)
		require.False(t, r.acquire("o2", "l2", dead).OK, "a claim after the claim time gets nothing")
		require.EqualValues(t, 1, r.state().Waiters, "and queues again, at the back")
	})
}

// A waiter that gives up leaves the queue; one that gives up after the lock
// was handed to it passes the lock on at once.
func TestAbandonedWaiterLeavesAndHandsOn(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		r := newQueueRig(t, b)
		first := r.acquire("o1", "l1", nil)
		w2, w3, w4 := r.waiter("o2", 5*time.Second), r.waiter("o3", 5*time.Second), r.waiter("o4", 5*time.Second)
		for _, w := range []struct {
			owner, level string
			w            *scripts.Waiter
		}{{"o2", "l2", w2}, {"o3", "l3", w3}, {"o4", "l4", w4}} {
			require.False(t, r.acquire(w.owner, w.level, w.w).OK)
		}
		undone, err := scripts.Abandon(r.ctx, r.rdb, r.k, r.request("o2", "l2", w2))
		require.NoError(t, err)
		require.False(t, undone, "a queued waiter holds no level")
		require.EqualValues(t, 2, r.state().Waiters)

		require.Equal(t, scripts.Released{}, r.release("o1", first.Token, "l1"))
		require.Equal(t, "o3", r.state().Owner, "the waiter that left is skipped")
		undone, err = scripts.Abandon(r.ctx, r.rdb, r.k, r.request("o3", "l3", w3))
		require.NoError(t, err)
		require.True(t, undone, "the handed level is given back")
		st := r.state()
		require.Equal(t, "o4", st.Owner, "and the lock handed on at once")
		require.EqualValues(t, 3, st.Token)
		require.Zero(t, st.Waiters)
	})
}

// Nobody waiting, nobody told: the uncontended path publishes nothing.
func TestNoMessageWithoutWaiters(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		r := newQueueRig(t, b)
		ps := r.rdb.PSubscribe(r.ctx, r.k.Lock+"*") // any channel of this lock's
		defer ps.Close()
		_, err := ps.Receive(r.ctx)
		require.NoError(t, err)
		for i := range 3 {
			a := r.acquire("o", "l", nil)
			require.EqualValues(t, i+1, a.Token)
			r.acquire("o", "l2", nil)
			require.Equal(t, scripts.Released{Depth: 1}, r.release("o", a.Token, "l2"))
			require.Equal(t, scripts.Released{}, r.release("o", a.Token, "l"))
		}
		select {
		case m := <-ps.Channel():
			t.Fatalf("published %q on %s with nobody waiting", m.Payload, m.Channel)
		case <-time.After(200 * time.Millisecond):
		}
	})
}

// A waiter's poll never shortens the queue's expiry that a waiter with a
// longer TTL set: each keeps its place for its own time at least.
func TestQueueExpiryNeverShortened(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		r := newQueueRig(t, b)
		r.acquire("o1", "l1", nil)
		long := r.waiter("o2", time.Second)
		long.Queue = time.Hour
		require.False(t, r.acquire("o2", "l2", long).OK)
		short := r.waiter("o3", time.Second)
		short.Queue = time.Second
		require.False(t, r.acquire("o3", "l3", short).OK)
		require.False(t, r.acquire("o3", "l3", short).OK, "a poll")
		left := r.rdb.PTTL(r.ctx, r.k.Queue).Val()
		require.Greater(t, left, 59*time.Minute, "the short waiter cut the queue's expiry to %v", left)

		longer := r.waiter("o4", time.Second)
		longer.Queue = 2 * time.Hour
		require.False(t, r.acquire("o4", "l4", longer).OK)
		require.Greater(t, r.rdb.PTTL(r.ctx, r.k.Queue).Val(), 119*time.Minute, "a longer one does raise it")
	})
}

// A reentry by a Lock call's later attempt (a poll) takes the call's
// queue entry out even when the hold lacks the flag q: an entry left there
// would later be handed the lock after its call had returned. The scripts
// set q on every hold a waiter queues behind, so the state is written by
// hand, as an operator's DEL of the hold and a take the scripts cannot
// see would leave it.
func TestLaterAttemptLeavesTheQueueOnReentry(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		r := newQueueRig(t, b)
		held := r.acquire("o", "outer", nil)
		w := r.waiter("o", time.Second)
		req := r.request("o", "ra", w)
		require.NoError(t, r.rdb.ZAdd(r.ctx, r.k.Queue, redis.Z{Score: 1, Member: memberOf(req)}).Err())
		req.Again = true
		again, err := scripts.Acquire(r.ctx, r.rdb, r.k, req)
		require.NoError(t, err)
		require.Equal(t, scripts.Acquired{OK: true, Token: held.Token, Depth: 2}, again)
		require.Zero(t, r.rdb.Exists(r.ctx, r.k.Queue).Val(), "the call's entry left the queue")
	})
}

// memberOf is r's queue entry, as queue.lua lays it out.
func memberOf(r *scripts.Request) string {
	return r.Level + "\n" + fmt.Sprint(r.Waiter.Claim.Milliseconds()) + "\n" + r.Owner + "\n" + r.Meta + "\np" + r.Waiter.Channel
}

// A Lock call's first attempt cannot be in the queue, so its reentry runs
// no ZREM; a later attempt (Again: a poll, or the claim of a handed lock)
// may have queued the call, and leaves the queue. MONITOR shows the
// commands a script runs: a real Redis only.
func TestReentryCommands(t *testing.T) {
	b := testenv.Backend{Name: "redis", Client: testenv.Redis(t)}
	r := newQueueRig(t, b)
	mon := testenv.NewMonitor(t, b.Client)
	commands := func() []string {
		t.Helper()
		return testenv.ScriptCommands(mon.Lines(), r.k.Lock, r.k.Queue, r.k.Counter, r.k.Floor)
	}
	attempt := func(level string, again bool) scripts.Acquired {
		t.Helper()
		req := r.request("o", level, r.waiter("o", time.Second))
		req.Again = again
		a, err := scripts.Acquire(r.ctx, r.rdb, r.k, req)
		require.NoError(t, err)
		return a
	}
	commands()
	first := attempt("outer", false)
	require.True(t, first.OK)
	require.Equal(t, []string{"EXISTS", "INCR", "HSET", "PEXPIRE"}, commands(),
		"a strict take of a name never used: the floor is among the keys EXISTS counts")

	require.Equal(t, scripts.Acquired{OK: true, Token: first.Token, Depth: 2}, attempt("inner", false))
	require.Equal(t, []string{"EXISTS", "HGETALL", "HSET", "PEXPIRE"}, commands(), "a first attempt's reentry")

	require.Equal(t, scripts.Acquired{OK: true, Token: first.Token, Depth: 3}, attempt("again", true))
	require.Equal(t, []string{"EXISTS", "HGETALL", "ZREM", "HSET", "PEXPIRE"}, commands(), "a later attempt's reentry leaves the queue")
}
