package reentrant_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage/memory"
)

// multiBackend is a deployment the LockMulti tests run on: two clients
// of it, and (for one Redis deployment) the client the raw keys are read
// with.
type multiBackend struct {
	c, d *reentrant.Client
	raw  redis.UniversalClient // nil for Redlock
}

// eachMultiBackend runs f on miniredis, the real servers and a Redlock of
// three nodes (miniredis, and redis-server processes: eachRedlock).
func eachMultiBackend(t *testing.T, f func(t *testing.T, b multiBackend)) {
	testenv.EachRedis(t, func(t *testing.T, be testenv.Backend) {
		f(t, multiBackend{c: newClient(t, be.Client), d: newClient(t, be.Client), raw: be.Client})
	})
	t.Run("redlock", func(t *testing.T) {
		eachRedlock(t, 3, func(t *testing.T, s redlockSet) {
			f(t, multiBackend{c: newRedlock(t, s.nodes), d: newRedlock(t, s.nodes)})
		})
	})
}

// keysLeft returns the keys of name that exist, of the lock itself and its
// queue and strict counter (the time tokens' floor is the slot's).
func keysLeft(t *testing.T, raw redis.UniversalClient, name string) []string {
	t.Helper()
	k := scripts.KeysFor(prefix, name)
	var out []string
	for _, key := range []string{k.Lock, k.Queue, k.Counter} {
		if raw.Exists(t.Context(), key).Val() > 0 {
			out = append(out, key)
		}
	}
	return out
}

// All or nothing: with b held elsewhere, TryLockMulti(a, b, c) fails
// naming b and takes nothing; once b is free it takes all three, each with
// its own token, and Unlock frees them.
func TestLockMultiAllOrNothing(t *testing.T) {
	eachMultiBackend(t, func(t *testing.T, be multiBackend) {
		ctx, p := t.Context(), testenv.Unique(t)
		a, b, c := p+"/a", p+"/b", p+"/c"
		hb, err := be.d.Lock(ctx, b)
		require.NoError(t, err)

		_, err = be.c.TryLockMulti(ctx, []string{c, b, a})
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		var na *reentrant.NotAcquiredError
		require.ErrorAs(t, err, &na)
		require.Equal(t, []string{b}, na.Names)
		for _, n := range []string{a, c} {
			st, err := be.c.Inspect(ctx, n)
			require.NoError(t, err)
			require.False(t, st.Held, n)
			if be.raw != nil {
				require.Empty(t, keysLeft(t, be.raw, n), "one script: a refused try leaves no key")
			}
		}
		if be.raw != nil {
			require.Zero(t, be.raw.Exists(ctx, scripts.KeysFor(prefix, b).Queue).Val(), "a try does not queue")
		}

		require.NoError(t, hb.Unlock(ctx))
		m, err := be.c.TryLockMulti(ctx, []string{c, b, a, b})
		require.NoError(t, err)
		require.Equal(t, []string{a, b, c}, m.Names())
		require.NoError(t, m.Err())
		require.Greater(t, m.Token(b), hb.Token(), "b's token rises")
		require.Equal(t, fence.None, m.Token(p+"/x"))
		carried, ok := fence.FromContext(m.Context())
		require.True(t, ok)
		for _, n := range []string{a, b, c} {
			require.Equal(t, m.Token(n), carried[n], "the context carries every token")
			st, err := be.c.Inspect(ctx, n)
			require.NoError(t, err)
			require.True(t, st.Held)
			require.Equal(t, m.Token(n), st.Token)
		}
		_, err = be.d.TryLock(ctx, a)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)

		require.NoError(t, m.Unlock(ctx))
		require.ErrorIs(t, m.Err(), reentrant.ErrReleased)
		require.ErrorIs(t, context.Cause(m.Context()), reentrant.ErrReleased)
		require.ErrorIs(t, m.Unlock(ctx), reentrant.ErrNotHeld, "a second Unlock")
		for _, n := range []string{a, b, c} {
			st, err := be.c.Inspect(ctx, n)
			require.NoError(t, err)
			require.False(t, st.Held, n)
		}
	})
}

// Reentry: a name the owner holds keeps its token, one level deeper, and
// goes back to its depth at Unlock; the other names are taken fresh.
func TestLockMultiReenters(t *testing.T) {
	eachMultiBackend(t, func(t *testing.T, be multiBackend) {
		ctx, p := t.Context(), testenv.Unique(t)
		outer, err := be.c.Lock(ctx, p+"/a")
		require.NoError(t, err)
		m, err := be.c.LockMulti(outer.Context(), []string{p + "/a", p + "/b"})
		require.NoError(t, err)
		require.Equal(t, outer.Token(), m.Token(p+"/a"))
		require.EqualValues(t, 2, m.Lease(p+"/a").Depth())
		require.EqualValues(t, 1, m.Lease(p+"/b").Depth())
		require.NoError(t, m.Unlock(ctx))
		// A Redlock release returns on a majority; the last node may
		// answer after, and Inspect reads every node that answers.
		require.Eventually(t, func() bool {
			st, err := be.c.Inspect(ctx, p+"/a")
			return err == nil && st.Held && st.Depth == 1
		}, time.Minute, 5*time.Millisecond, "back to the depth it had")
		require.NoError(t, outer.Err())
		st, err := be.c.Inspect(ctx, p+"/b")
		require.NoError(t, err)
		require.False(t, st.Held)
		require.NoError(t, outer.Unlock(ctx))

		// Past the maximum depth nothing is taken.
		outer, err = be.c.Lock(ctx, p+"/a", reentrant.WithMaxDepth(1))
		require.NoError(t, err)
		_, err = be.c.LockMulti(outer.Context(), []string{p + "/a", p + "/c"}, reentrant.WithMaxDepth(1))
		require.ErrorIs(t, err, reentrant.ErrTooDeep)
		st, err = be.c.Inspect(ctx, p+"/c")
		require.NoError(t, err)
		require.False(t, st.Held)
		require.NoError(t, outer.Unlock(ctx))
	})
}

// Bad input is ErrInvalid, and nothing is taken.
func TestLockMultiInvalid(t *testing.T) {
	_, rdb := testenv.Mini(t)
	c := newClient(t, rdb)
	ctx := t.Context()
	for _, names := range [][]string{nil, {}, {"a", ""}, make([]string, reentrant.MaxMultiNames+1)} {
		if len(names) > 2 {
			for i := range names {
				names[i] = fmt.Sprint("n", i)
			}
		}
		_, err := c.LockMulti(ctx, names)
		require.ErrorIs(t, err, reentrant.ErrInvalid, "%d names", len(names))
		_, err = c.TryLockMulti(ctx, names)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		if len(names) == 0 {
			require.EqualError(t, err, "reentrant: trylockmulti: invalid argument: no names", "no empty name quoted")
		}
	}
	//nolint:staticcheck // a nil context on purpose
	_, err := c.LockMulti(nil, []string{"a"})
	require.ErrorIs(t, err, reentrant.ErrInvalid)
	var nilLease *reentrant.MultiLease
	require.ErrorIs(t, nilLease.Unlock(ctx), reentrant.ErrNotHeld)
	require.ErrorIs(t, nilLease.Err(), reentrant.ErrNotHeld)
	st, err := c.Inspect(ctx, "a")
	require.NoError(t, err)
	require.False(t, st.Held)
}

// A waiting LockMulti is woken by the release of the name it waits for:
// its polls are a minute apart, so only the wake message can end its wait
// within the ceiling.
func TestLockMultiWokenByRelease(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, be testenv.Backend) {
		ctx, p := t.Context(), testenv.Unique(t)
		c := newClient(t, be.Client, reentrant.WithTTL(2*time.Minute))
		d := newClient(t, be.Client)
		hb, err := d.Lock(ctx, p+"/b")
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			m, err := c.LockMulti(ctx, []string{p + "/a", p + "/b"}, reentrant.WithRetry(reentrant.LimitRetry(reentrant.LinearBackoff(time.Minute), 10)))
			if err == nil {
				err = m.Unlock(context.Background())
			}
			got <- err
		}()
		queue := scripts.KeysFor(prefix, p+"/b").Queue
		require.Eventually(t, func() bool { return be.Client.ZCard(ctx, queue).Val() == 1 }, time.Minute, 5*time.Millisecond)
		st, err := c.Inspect(ctx, p+"/a")
		require.NoError(t, err)
		require.False(t, st.Held, "nothing held while it waits")
		require.NoError(t, hb.Unlock(ctx))
		requireWoken(t, got)
		require.Zero(t, be.Client.Exists(ctx, queue).Val())
	})
}

// A cancelled LockMulti leaves nothing held or queued.
func TestLockMultiCancelled(t *testing.T) {
	eachMultiBackend(t, func(t *testing.T, be multiBackend) {
		p := testenv.Unique(t)
		hb, err := be.d.Lock(t.Context(), p+"/b")
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		got := make(chan error, 1)
		go func() {
			_, err := be.c.LockMulti(ctx, []string{p + "/a", p + "/b", p + "/c"})
			got <- err
		}()
		if be.raw != nil {
			queue := scripts.KeysFor(prefix, p+"/b").Queue
			require.Eventually(t, func() bool { return be.raw.ZCard(ctx, queue).Val() == 1 }, time.Minute, 5*time.Millisecond)
		} else {
			time.Sleep(50 * time.Millisecond) // a few attempts
		}
		cancel()
		err = <-got
		require.ErrorIs(t, err, context.Canceled)
		if errors.Is(err, reentrant.ErrOutcomeUnknown) {
			// A cancel while a Redlock attempt's nodes had not answered:
			// what they grant late is undone in the background.
			require.NotErrorIs(t, err, reentrant.ErrNotAcquired)
		} else {
			require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		}
		var na *reentrant.NotAcquiredError
		if errors.As(err, &na) { // unless the cancel came during the first attempt
			require.Equal(t, []string{p + "/b"}, na.Names)
		}
		for _, n := range []string{p + "/a", p + "/b", p + "/c"} {
			require.Eventually(t, func() bool {
				st, err := be.c.Inspect(t.Context(), n)
				return err == nil && st.Held == (n == p+"/b")
			}, time.Minute, 5*time.Millisecond, n)
			// Its entry leaves b's queue as the call returns, or, on a
			// machine too slow to answer within the cleanup budget, in
			// the background soon after.
			require.Eventually(t, func() bool {
				st, err := be.c.Inspect(t.Context(), n)
				return err == nil && st.Waiters == 0
			}, 10*time.Second, 5*time.Millisecond, n)
		}
		require.NoError(t, hb.Unlock(t.Context()))
	})
}

// A MultiLease ends when any of its names is lost, with that name in the
// cause.
func TestLockMultiLoss(t *testing.T) {
	eachMultiBackend(t, func(t *testing.T, be multiBackend) {
		ctx, p := t.Context(), testenv.Unique(t)
		m, err := be.c.LockMulti(ctx, []string{p + "/a", p + "/b"})
		require.NoError(t, err)
		_, err = be.d.ForceUnlock(ctx, p+"/b", fence.None)
		require.NoError(t, err)
		reentrant.RenewAllNow(be.c)
		select {
		case <-m.Done():
		case <-time.After(time.Minute):
			t.Fatal("the MultiLease did not end")
		}
		cause := context.Cause(m.Context())
		require.ErrorIs(t, cause, reentrant.ErrLost)
		require.Contains(t, cause.Error(), p+"/b")
		require.ErrorIs(t, m.Err(), reentrant.ErrLost)
		err = m.Unlock(ctx)
		require.ErrorIs(t, err, reentrant.ErrNotHeld)
		st, err := be.c.Inspect(ctx, p+"/a")
		require.NoError(t, err)
		require.False(t, st.Held, "Unlock releases the names still held")
	})
}

// The order storm: goroutines lock {a,b}, {b,a} and {b,c,a} for a while.
// No call waits past its deadline (nobody holds a name while waiting for
// another, so nothing deadlocks), no name has two holders at once (a
// fenced store per name refuses none of the holders' writes, and a local
// count of holders never goes past one), and each name's tokens rise.
func TestLockMultiOrderStorm(t *testing.T) {
	d := 20 * time.Second
	if testing.Short() {
		d = 3 * time.Second
	}
	testenv.EachRedis(t, func(t *testing.T, be testenv.Backend) {
		switch {
		case be.Mini != nil:
			orderStorm(t, newClient(t, be.Client), 2*time.Second)
		case strings.HasSuffix(t.Name(), "evalsha"):
			// The same scripts sent another way: a shorter storm.
			orderStorm(t, newClient(t, be.Client), min(d, 3*time.Second))
		default:
			orderStorm(t, newClient(t, be.Client), d)
		}
	})
	// Redlock takes the names one at a time and gives back on a refusal.
	t.Run("redlock", func(t *testing.T) {
		_, nodes := redlockNodes(t, 3)
		orderStorm(t, newRedlock(t, nodes), 2*time.Second)
	})
}

func orderStorm(t *testing.T, c *reentrant.Client, d time.Duration) {
	p := testenv.Unique(t)
	a, b, cc := p+"/a", p+"/b", p+"/c"
	sets := [][]string{{a, b}, {b, a}, {b, cc, a}}
	store := memory.New()
	var holders sync.Map // name -> *atomic.Int32
	for _, n := range []string{a, b, cc} {
		holders.Store(n, new(atomic.Int32))
	}
	var mu sync.Mutex
	last := map[string]fence.Token{}
	var calls, overlaps, longest atomic.Int64
	perCaller := make([]int, 6)
	errs := make(chan error, 64)
	report := func(err error) { // never blocks: past 64 errors, the rest are dropped
		select {
		case errs <- err:
		default:
		}
	}
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			names := sets[g%len(sets)]
			for time.Now().Before(stop) {
				// A deadline far above any fair wait: a deadlock would
				// spend it all.
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				began := time.Now()
				m, err := c.LockMulti(ctx, names)
				cancel()
				if w := int64(time.Since(began)); w > longest.Load() {
					longest.Store(w) // racy max: a report, not a check
				}
				if err != nil {
					report(fmt.Errorf("%v: %w", names, err))
					return
				}
				calls.Add(1)
				perCaller[g]++
				for _, n := range names {
					h, _ := holders.Load(n)
					if h.(*atomic.Int32).Add(1) != 1 {
						overlaps.Add(1)
					}
					tok := m.Token(n)
					mu.Lock()
					if tok <= last[n] {
						report(fmt.Errorf("%s: token %d after %d", n, tok, last[n]))
					}
					last[n] = tok
					mu.Unlock()
					if err := store.Put(context.Background(), n, []byte(names[0]), tok); err != nil {
						report(fmt.Errorf("%s: a holder's write refused: %w", n, err))
					}
				}
				time.Sleep(time.Millisecond)
				for _, n := range names {
					h, _ := holders.Load(n)
					h.(*atomic.Int32).Add(-1)
				}
				if err := m.Unlock(context.Background()); err != nil {
					report(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []string
	for err := range errs {
		all = append(all, err.Error())
	}
	require.Empty(t, all)
	require.Zero(t, overlaps.Load(), "two holders of one name")
	for g, n := range perCaller {
		require.Positive(t, n, "caller %d (%v) never got its names", g, sets[g%len(sets)])
	}
	t.Logf("SUMMARY order-storm %d calls in %v, per caller %v, longest wait %v",
		calls.Load(), d, perCaller, time.Duration(longest.Load()).Round(time.Millisecond))
}

// On Redlock a waiting LockMulti listens on the wake channel of the name
// that refused, on every node: its polls are a minute apart, so only the
// release's message ends its wait within the ceiling.
func TestRedlockLockMultiWokenByRelease(t *testing.T) {
	eachRedlock(t, 3, func(t *testing.T, s redlockSet) {
		ctx, p := t.Context(), testenv.Unique(t)
		c, d := newRedlock(t, s.nodes), newRedlock(t, s.nodes)
		hb, err := d.Lock(ctx, p+"/b")
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			m, err := c.LockMulti(ctx, []string{p + "/a", p + "/b"}, reentrant.WithRetry(reentrant.LinearBackoff(time.Minute)))
			if err == nil {
				err = m.Unlock(context.Background())
			}
			got <- err
		}()
		channel := scripts.KeysFor(prefix, p+"/b").Lock + ":w"
		require.Eventually(t, func() bool {
			n := s.nodes[0].PubSubNumSub(ctx, channel).Val()[channel]
			return n > 0
		}, time.Minute, 5*time.Millisecond, "the waiter listens")
		require.NoError(t, hb.Unlock(ctx))
		requireWoken(t, got)
	})
}

// requireWoken waits for the result of a waiting LockMulti whose names
// were just released, and fails t unless it succeeded within 30 s: the
// ceiling of a wake, not a bound on a loaded machine's latency.
func requireWoken(t *testing.T, got <-chan error, msgAndArgs ...any) {
	t.Helper()
	select {
	case err := <-got:
		require.NoError(t, err, msgAndArgs...)
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting LockMulti was not woken")
	}
}

// A LockMulti whose script is answered past the lease's safe window hands
// out no lease: the name it reentered is given back to the depth it had
// (the outer hold goes on), the fresh one is undone, and TryLockMulti
// fails with ErrNotAcquired; LockMulti waits on and takes both.
func TestLockMultiAfterALateAnswer(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		const ttl = 300 * time.Millisecond
		rdb := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
		t.Cleanup(func() { _ = rdb.Close() })
		h := &delayArmed{d: ttl}
		rdb.AddHook(h)
		c := newClient(t, rdb)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		p := testenv.Unique(t)
		names := []string{p + "/a", p + "/b"}
		outer, err := c.Lock(ctx, names[0])
		require.NoError(t, err)

		h.armed.Store(true)
		_, err = c.TryLockMulti(outer.Context(), names, reentrant.WithTTL(ttl))
		require.ErrorIs(t, err, reentrant.ErrNotAcquired, "a grant answered past its window is no lease")
		require.False(t, h.armed.Load(), "the multi script's answer was held back")
		require.Eventually(t, func() bool {
			a, aerr := c.Inspect(ctx, names[0])
			b, berr := c.Inspect(ctx, names[1])
			return aerr == nil && berr == nil && a.Held && a.Depth == 1 && a.Token == outer.Token() && !b.Held
		}, time.Minute, 5*time.Millisecond, "the reentry given back, the fresh name undone")
		require.NoError(t, outer.Err(), "the outer hold goes on")
		require.NoError(t, outer.Unlock(ctx))

		h.armed.Store(true)
		m, err := c.LockMulti(ctx, names, reentrant.WithTTL(ttl))
		require.NoError(t, err, "LockMulti waits on after a late answer")
		require.False(t, h.armed.Load())
		for _, n := range names {
			require.EqualValues(t, 1, m.Lease(n).Depth())
		}
		require.NoError(t, m.Unlock(ctx))
		for _, n := range names {
			st, err := c.Inspect(ctx, n)
			require.NoError(t, err)
			require.False(t, st.Held, n)
		}
	})
}
