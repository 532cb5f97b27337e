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

// queueRig runs the scripts for one lock with waiters that listen on
// channels of their own.
type queueRig struct {
	t   *testing.T
	ctx context.Context
	rdb *redis.Client
	k   scripts.Keys
	ps  *redis.PubSub
	// tokens is the token mode of the rig's acquires and releases: the
	// strict counter unless a test sets it.
	tokens scripts.Tokens
}

func newQueueRig(t *testing.T, rdb *redis.Client) *queueRig {
	r := &queueRig{t: t, ctx: t.Context(), rdb: rdb, k: keys(t)}
	r.ps = rdb.PSubscribe(r.ctx, r.k.Lock+":ch:*")
	t.Cleanup(func() { _ = r.ps.Close() })
	_, err := r.ps.Receive(r.ctx)
	require.NoError(t, err)
	return r
}

func (r *queueRig) waiter(owner string, claim time.Duration) *scripts.Waiter {
	return &scripts.Waiter{Channel: r.k.Lock + ":ch:" + owner, Claim: claim, Queue: time.Minute}
}

func (r *queueRig) acquire(owner, level string, w *scripts.Waiter) scripts.Acquired {
	r.t.Helper()
	a, err := scripts.Acquire(r.ctx, r.rdb, r.k, &scripts.Request{Owner: owner, TTL: time.Minute, Level: level, Waiter: w, Tokens: r.tokens})
	require.NoError(r.t, err)
	return a
}

func (r *queueRig) release(owner string, tok fence.Token, level string) int64 {
	r.t.Helper()
	n, err := scripts.Release(r.ctx, r.rdb, r.k, owner, tok, level, r.tokens)
	require.NoError(r.t, err)
	return n
}

func (r *queueRig) state() scripts.State {
	r.t.Helper()
	st, err := scripts.Inspect(r.ctx, r.rdb, r.k, scripts.Tokens{})
	require.NoError(r.t, err)
	return st
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
		r := newQueueRig(t, b.Client)
		first := r.acquire("o1", "l1", nil)
		require.True(t, first.OK)
		w2, w3 := r.waiter("o2", 5*time.Second), r.waiter("o3", 5*time.Second)
		require.False(t, r.acquire("o2", "l2", w2).OK)
		require.False(t, r.acquire("o3", "l3", w3).OK)
		require.False(t, r.acquire("o2", "l2", w2).OK, "a waiter polling again")
		require.EqualValues(t, 2, r.state().Waiters, "a poll must not queue twice")

		require.Zero(t, r.release("o1", first.Token, "l1"))
		ch, msg := r.message()
		require.Equal(t, w2.Channel, ch, "only the oldest waiter is told")
		require.Equal(t, "l2 2", msg)
		st := r.state()
		require.Equal(t, "o2", st.Owner, "handed over inside the release")
		require.EqualValues(t, 2, st.Token)
		require.Equal(t, []string{"l2"}, st.Levels)
		require.EqualValues(t, 1, st.Waiters)
		require.LessOrEqual(t, st.TTL, 5*time.Second, "an unclaimed handoff lasts the claim time")

		// Nobody else gets in meanwhile, not even a TryLock.
		require.False(t, r.acquire("o4", "l4", nil).OK)
		require.Equal(t, scripts.Acquired{OK: true, Token: 2, Depth: 1}, r.acquire("o2", "l2", w2), "the claim")
		require.Greater(t, r.state().TTL, 5*time.Second, "a claim raises the lease to the TTL")
		require.Equal(t, scripts.Acquired{OK: true, Token: 2, Depth: 1}, r.acquire("o2", "l2", w2), "a repeated claim")

		require.Zero(t, r.release("o2", 2, "l2"))
		ch, msg = r.message()
		require.Equal(t, w3.Channel, ch)
		require.Equal(t, "l3 3", msg)
		require.Equal(t, scripts.Acquired{OK: true, Token: 3, Depth: 1}, r.acquire("o3", "l3", w3))
		require.Zero(t, r.release("o3", 3, "l3"))
		require.Empty(t, r.unexpected(), "no waiter, no message")
		require.Zero(t, r.rdb.Exists(r.ctx, r.k.Queue).Val(), "free with nobody queued leaves no queue key")
		require.Zero(t, r.rdb.Exists(r.ctx, r.k.Lock).Val(), "nor a hash: the lock is compacted")
		require.Equal(t, "3 1 o3", r.rdb.Get(r.ctx, r.k.Counter).Val(), "into the counter's record: last token 3, first 1, owner o3")
	})
}

// TryLock never jumps the queue: a free lock that others wait for is handed
// to the oldest of them instead. Reentry never queues.
func TestQueueOrderHolds(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		r := newQueueRig(t, b.Client)
		w1 := r.waiter("o1", 5*time.Second)
		held := r.acquire("o1", "l1", w1)
		require.Equal(t, scripts.Acquired{OK: true, Token: 1, Depth: 1}, held, "a waiter that finds it free takes it at once")
		require.Equal(t, scripts.Acquired{OK: true, Token: 1, Depth: 2}, r.acquire("o1", "l1b", w1), "reentry with a waiter")
		require.Zero(t, r.state().Waiters, "reentry never queues")

		w2 := r.waiter("o2", 5*time.Second)
		require.False(t, r.acquire("o2", "l2", w2).OK)
		// The holder's lease runs out without a release.
		require.NoError(t, r.rdb.HSet(r.ctx, r.k.Lock, "x", "1").Err())
		require.False(t, r.acquire("o3", "l3", nil).OK, "TryLock must not take a lock someone waits for")
		st := r.state()
		require.Equal(t, "o2", st.Owner, "the TryLock handed the free lock to the waiter")
		ch, msg := r.message()
		require.Equal(t, w2.Channel, ch)
		require.Equal(t, "l2 2", msg)
	})
}

// A waiter that never claims (it died, or missed its message) holds the
// lock up for its claim time only; the next waiter's poll takes it then.
func TestUnclaimedHandoffPassesOn(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		r := newQueueRig(t, b.Client)
		first := r.acquire("o1", "l1", nil)
		dead, next := r.waiter("o2", 50*time.Millisecond), r.waiter("o3", 5*time.Second)
		require.False(t, r.acquire("o2", "l2", dead).OK)
		require.False(t, r.acquire("o3", "l3", next).OK)
		require.Zero(t, r.release("o1", first.Token, "l1"))
		require.Equal(t, "o2", r.state().Owner)
		require.False(t, r.acquire("o3", "l3", next).OK, "within the claim time the handoff stands")
		b.Expire(80 * time.Millisecond)
		require.Equal(t, scripts.Acquired{OK: true, Token: 3, Depth: 1}, r.acquire("o3", "l3", next),
			"past the claim time the next waiter takes it, with a new token")
		require.Zero(t, r.state().Waiters)
		late, err := scripts.Acquire(r.ctx, r.rdb, r.k, &scripts.Request{Owner: "o2", TTL: time.Minute, Level: "l2", Waiter: dead})
		require.NoError(t, err)
		require.False(t, late.OK, "a claim after the claim time gets nothing")
		require.EqualValues(t, 1, r.state().Waiters, "and queues again, at the back")
	})
}

// A waiter that gives up leaves the queue; one that gives up after the lock
// was handed to it passes the lock on at once.
func TestAbandonedWaiterLeavesAndHandsOn(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		r := newQueueRig(t, b.Client)
		first := r.acquire("o1", "l1", nil)
		w2, w3, w4 := r.waiter("o2", 5*time.Second), r.waiter("o3", 5*time.Second), r.waiter("o4", 5*time.Second)
		for _, w := range []struct {
			owner, level string
			w            *scripts.Waiter
		}{{"o2", "l2", w2}, {"o3", "l3", w3}, {"o4", "l4", w4}} {
			require.False(t, r.acquire(w.owner, w.level, w.w).OK)
		}
		undone, err := scripts.Abandon(r.ctx, r.rdb, r.k, &scripts.Request{Owner: "o2", Level: "l2", Waiter: w2})
		require.NoError(t, err)
		require.False(t, undone, "a queued waiter holds no level")
		require.EqualValues(t, 2, r.state().Waiters)

		require.Zero(t, r.release("o1", first.Token, "l1"))
		require.Equal(t, "o3", r.state().Owner, "the waiter that left is skipped")
		undone, err = scripts.Abandon(r.ctx, r.rdb, r.k, &scripts.Request{Owner: "o3", Level: "l3", Waiter: w3})
		require.NoError(t, err)
		require.True(t, undone, "the handed level is given back")
		st := r.state()
		require.Equal(t, "o4", st.Owner, "and the lock handed on at once")
		require.EqualValues(t, 3, st.Token)
		require.Zero(t, st.Waiters)
	})
}

// A queue key this library did not write is refused, and nothing changes:
// not the queue, and not the lock a release would have freed.
func TestForeignQueueRefused(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		for i, plant := range []func(key string) error{
			func(key string) error { return rdb.Set(ctx, key, "x", 0).Err() },
			func(key string) error { return rdb.ZAdd(ctx, key, redis.Z{Score: 1, Member: "no fields"}).Err() },
		} {
			r := newQueueRig(t, rdb)
			held := r.acquire("o1", "l1", nil)
			// A waiter queued, so the release reads the queue: then the
			// queue key is replaced.
			require.False(t, r.acquire("o2", "l2", r.waiter("o2", time.Second)).OK)
			require.NoError(t, rdb.Del(ctx, r.k.Queue).Err())
			require.NoError(t, plant(r.k.Queue))
			before := testenv.Snapshot(t, rdb, r.k.Queue)
			if i == 0 {
				_, err := scripts.Acquire(ctx, rdb, r.k, &scripts.Request{Owner: "o3", TTL: time.Minute, Level: "l3", Waiter: r.waiter("o3", time.Second)})
				require.ErrorIs(t, err, scripts.ErrForeign, "a waiter joining a queue of another type is refused")
			}
			_, err := scripts.Release(ctx, rdb, r.k, "o1", held.Token, "l1", scripts.Tokens{})
			require.ErrorIs(t, err, scripts.ErrForeign)
			require.ErrorContains(t, err, r.k.Queue)
			fields, ferr := testenv.LockFields(ctx, rdb, r.k.Lock)
			require.NoError(t, ferr)
			require.Equal(t, "o1", fields["o"], "a refused release frees nothing")
			require.NotEmpty(t, fields["x"], "a refused release frees nothing")
			if i == 0 {
				_, err = scripts.Inspect(ctx, rdb, r.k, scripts.Tokens{})
				require.ErrorIs(t, err, scripts.ErrForeign, "inspect refuses a queue of another type too")
			}
			require.Equal(t, before, testenv.Snapshot(t, rdb, r.k.Queue))
		}
	})
}

// Nobody waiting, nobody told: the uncontended path publishes nothing.
func TestNoMessageWithoutWaiters(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		r := newQueueRig(t, b.Client)
		// Any channel of this lock's (other tests share the server).
		ps := r.rdb.PSubscribe(r.ctx, r.k.Lock+"*")
		defer ps.Close()
		_, err := ps.Receive(r.ctx)
		require.NoError(t, err)
		for i := range 3 {
			a := r.acquire("o", "l", nil)
			require.EqualValues(t, i+1, a.Token)
			r.acquire("o", "l2", nil)
			require.EqualValues(t, 1, r.release("o", a.Token, "l2"))
			require.Zero(t, r.release("o", a.Token, "l"))
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
		r := newQueueRig(t, b.Client)
		r.acquire("o1", "l1", nil)
		long := r.waiter("o2", time.Second)
		long.Queue = time.Hour
		require.False(t, r.acquire("o2", "l2", long).OK)
		short := r.waiter("o3", time.Second)
		short.Queue = time.Second
		require.False(t, r.acquire("o3", "l3", short).OK)
		require.False(t, r.acquire("o3", "l3", short).OK, "a poll")
		left, err := b.Client.PTTL(r.ctx, r.k.Queue).Result()
		require.NoError(t, err)
		require.Greater(t, left, 59*time.Minute, "the short waiter cut the queue's expiry to %v", left)

		// A longer one does raise it.
		longer := r.waiter("o4", time.Second)
		longer.Queue = 2 * time.Hour
		require.False(t, r.acquire("o4", "l4", longer).OK)
		left, err = b.Client.PTTL(r.ctx, r.k.Queue).Result()
		require.NoError(t, err)
		require.Greater(t, left, 119*time.Minute)
	})
}

// A reentry by a Lock call's later attempt (a poll) carries the call's
// queue member and takes it out of the queue, also when the hash has lost
// its flag q: an operator's DEL of
// the hash leaves the queue where the call still waits, and a member left
// there would later be handed the lock after its call had returned.
func TestReentryLeavesTheQueueAfterADeletedHash(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		r := newQueueRig(t, b.Client)
		require.True(t, r.acquire("x", "rx", nil).OK)
		w := r.waiter("o", time.Second)
		require.False(t, r.acquire("o", "ra", w).OK, "o's call A queues")
		require.NoError(t, b.Client.Del(r.ctx, r.k.Lock).Err()) // the operator
		require.True(t, r.acquire("o", "rb", nil).OK, "o's call B takes the free lock")
		again, err := scripts.Acquire(r.ctx, r.rdb, r.k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "ra",
			Waiter: w, Again: true}) // A polls: a reentry
		require.NoError(t, err)
		require.True(t, again.OK)
		require.EqualValues(t, 2, again.Depth)
		n, err := b.Client.ZCard(r.ctx, r.k.Queue).Result()
		require.NoError(t, err)
		require.Zero(t, n, "A's entry must leave the queue")
	})
}

// A Lock call's first attempt cannot be in the queue, so a reentry or a
// fresh take by it runs no ZREM: a reentry is HGETALL and HSET on the
// lock's keys (and TIME), as docs/design.md's table says. A later attempt
// (Again: a poll, or the claim of a handed lock) may have queued the call,
// and leaves the queue. MONITOR shows the commands a script runs; this
// needs a real Redis.
func TestReentryCommands(t *testing.T) {
	rdb := testenv.Redis(t)
	r := newQueueRig(t, rdb)
	mon := testenv.NewMonitor(t, rdb)
	commands := func() []string {
		t.Helper()
		return testenv.ScriptCommands(mon.Lines(), r.k.Lock, r.k.Queue, r.k.Counter)
	}
	attempt := func(level string, again bool) scripts.Acquired {
		t.Helper()
		a, err := scripts.Acquire(r.ctx, r.rdb, r.k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: level,
			Waiter: r.waiter("o", time.Second), Again: again})
		require.NoError(t, err)
		return a
	}
	first := attempt("outer", false)
	require.True(t, first.OK)
	require.Equal(t, []string{"HGETALL", "GET", "HSET", "SET"}, commands(), "a first attempt's take of a name never used")

	inner := attempt("inner", false)
	require.Equal(t, scripts.Acquired{OK: true, Token: first.Token, Depth: 2}, inner)
	require.Equal(t, []string{"HGETALL", "HSET"}, commands(), "the commands of a first attempt's reentry on the lock's keys")

	again := attempt("again", true)
	require.Equal(t, scripts.Acquired{OK: true, Token: first.Token, Depth: 3}, again)
	require.Equal(t, []string{"HGETALL", "ZREM", "HSET"}, commands(), "a later attempt's reentry leaves the queue")

	// An operator's DEL of the hash drops the flag q and leaves the queue,
	// where a call that queued before still waits: its next attempt takes
	// the lock and leaves the queue.
	other := r.waiter("p", time.Second)
	require.False(t, r.acquire("p", "waiting", other).OK)
	require.NoError(t, rdb.Del(r.ctx, r.k.Lock).Err())
	commands()
	taken, err := scripts.Acquire(r.ctx, r.rdb, r.k, &scripts.Request{Owner: "p", TTL: time.Minute, Level: "waiting",
		Waiter: other, Again: true})
	require.NoError(t, err)
	require.True(t, taken.OK)
	require.Equal(t, first.Token+1, taken.Token)
	require.Equal(t, []string{"HGETALL", "GET", "ZREM", "HSET", "SET"}, commands(), "a later attempt's take after a DEL")
	require.Zero(t, rdb.Exists(r.ctx, r.k.Queue).Val(), "the waiter left the queue")
}
