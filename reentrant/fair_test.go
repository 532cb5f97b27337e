//go:build unix

package reentrant_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// queued waits until name has n waiters.
func queued(t *testing.T, c *reentrant.Client, name string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := c.Inspect(t.Context(), name)
		return err == nil && st.Waiters == n
	}, 10*time.Second, 2*time.Millisecond, "waiting for %d waiters on %q", n, name)
}

// Waiters of two clients get the lock in the order they queued, and one
// client's waiters share one subscription.
func TestFIFOAcrossClients(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		pfx := testenv.Unique(t)
		own := reentrant.WithPrefix(pfx)
		clients := []*reentrant.Client{newClient(t, b.Client, own), newClient(t, b.Client, own)}
		name := "fifo"
		held, err := clients[0].Lock(t.Context(), name)
		require.NoError(t, err)

		const waiters = 12
		order := make(chan int, waiters)
		errs := make(chan error, waiters)
		for i := range waiters {
			go func() {
				l, err := clients[i%2].Lock(t.Context(), name)
				if err != nil {
					errs <- err
					return
				}
				order <- i
				errs <- l.Unlock(context.Background())
			}()
			queued(t, clients[0], name, int64(i+1))
		}
		// Two clients, two subscriptions: each client listens on one
		// channel of its own, however many of its calls wait.
		chans := b.Client.PubSubChannels(t.Context(), "*:c:*").Val()
		var mine []string
		for _, ch := range chans {
			if strings.HasPrefix(ch, pfx+":c:") {
				mine = append(mine, ch)
			}
		}
		require.Len(t, mine, 2, "one channel per client: %v", chans)
		for _, ch := range mine {
			require.EqualValues(t, 1, b.Client.PubSubNumSub(t.Context(), ch).Val()[ch])
		}

		require.NoError(t, held.Unlock(t.Context()))
		for i := range waiters {
			require.NoError(t, <-errs)
			require.Equal(t, i, <-order, "served out of order")
		}
	})
}

// A waiter whose context ends leaves the queue at once; the next waiter
// is not held up by it.
func TestCancelledWaiterLeavesQueue(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := newClient(t, b.Client, reentrant.WithHandoffTimeout(4*slow))
		name := testenv.Unique(t)
		held, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		gone := make(chan error, 1)
		go func() { _, err := c.Lock(ctx, name); gone <- err }()
		queued(t, c, name, 1)
		next := make(chan *reentrant.Lease, 1)
		go func() {
			l, err := c.Lock(t.Context(), name)
			if assertNoErr(t, err) {
				next <- l
			}
		}()
		queued(t, c, name, 2)
		cancel()
		require.ErrorIs(t, <-gone, reentrant.ErrNotAcquired)
		st, err := c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.EqualValues(t, 1, st.Waiters, "the cancelled waiter must be gone when Lock returns")

		start := time.Now()
		require.NoError(t, held.Unlock(t.Context()))
		l := <-next
		require.Less(t, time.Since(start), slow, "the remaining waiter was not handed the lock")
		require.Greater(t, l.Token(), held.Token(), "the handoff takes a fresh token")
	})
}

// Reentry never queues, even behind waiters; TryLock never jumps them.
func TestReentryAndTryLockWhileOthersWait(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := newClient(t, b.Client)
		name := testenv.Unique(t)
		held, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		got := make(chan *reentrant.Lease, 1)
		go func() {
			l, err := c.Lock(t.Context(), name)
			if assertNoErr(t, err) {
				got <- l
			}
		}()
		queued(t, c, name, 1)

		inner, err := c.TryLock(held.Context(), name)
		require.NoError(t, err, "the holder reenters past the queue")
		require.EqualValues(t, 2, inner.Depth())
		require.NoError(t, inner.Unlock(t.Context()))
		require.NoError(t, held.Unlock(t.Context()))
		_, err = c.TryLock(t.Context(), name)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired, "a TryLock right after the release must not take the waiter's turn")
		l := <-got
		require.Greater(t, l.Token(), held.Token())
		require.NoError(t, l.Unlock(t.Context()))
	})
}

// helperWaiterVar, set in a re-executed test binary's environment to
// "addr|prefix|name", makes it a waiter process (see TestMain): it queues
// for the lock and waits until it is killed.
const helperWaiterVar = "REDFENCE_HELPER_WAITER"

// helperWaiter is the waiter process's whole life.
func helperWaiter(spec string) {
	addr, rest, _ := strings.Cut(spec, "|")
	pfx, name, _ := strings.Cut(rest, "|")
	c, err := reentrant.New(redis.NewClient(&redis.Options{Addr: addr}), reentrant.WithPrefix(pfx))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	_, err = c.Lock(context.Background(), name)
	fmt.Fprintln(os.Stderr, "helper waiter: Lock returned", err)
	select {} // hold whatever it got until killed
}

// Close ends a waiting Lock with ErrClosed and takes it out of the queue:
// nothing of a closed client polls on.
func TestCloseEndsWaitingLock(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		holder, c := newClient(t, b.Client), newClient(t, b.Client)
		name := testenv.Unique(t)
		held, err := holder.Lock(t.Context(), name)
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { _, err := c.Lock(t.Context(), name); done <- err }()
		queued(t, holder, name, 1)
		require.NoError(t, c.Close())
		select {
		case err := <-done: // Lock has returned; the goroutine sends just after
			require.ErrorIs(t, err, reentrant.ErrClosed)
		case <-time.After(30 * time.Second): // a ceiling: otherwise it waits for the test's context
			t.Fatal("a Lock of a closed client still waits")
		}
		st, err := holder.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.Zero(t, st.Waiters, "the closed client's waiter must leave the queue")
		require.NoError(t, held.Unlock(t.Context()))
	})
}

// A waiter handed the lock takes it from the handoff message, without a
// claim round trip: its lease in Redis is the claim time at first, and the
// renewer extends it to the TTL within half of that. Without renewal the
// waiter claims in Redis, so that the lease lasts its TTL from the start.
func TestHandedLockTakenWithoutAClaim(t *testing.T) {
	t.Parallel() // see TestMain
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		for _, c := range []struct {
			name   string
			opts   []reentrant.ClientOption
			claims int64
		}{{"renewed", nil, 0}, {"without renewal", []reentrant.ClientOption{reentrant.WithoutRenewal()}, 1}} {
			t.Run(c.name, func(t *testing.T) {
				// The handoff must come within half the claim window (here
				// about 2 s) of the wait's start to be taken from the
				// message; subscribedWaiter's timers leave it that.
				claim := subscribedHandoff / 2
				w := subscribedWaiter(t, b.Client, b.Client.Options().Addr, "", c.opts...)
				held, got, n, holder, name := w.held, w.got, w.n, w.holder, w.name
				require.Len(t, b.Client.PubSubChannels(t.Context(), w.prefix+":c:*").Val(), 1)
				before := n.Load()
				require.NoError(t, held.Unlock(t.Context()))
				l := <-got
				require.NotNil(t, l)
				require.Equal(t, before+c.claims, n.Load(), "acquire scripts sent after the handoff")
				st, err := holder.Inspect(t.Context(), name)
				require.NoError(t, err)
				require.Equal(t, l.Token(), st.Token)
				if c.claims == 0 {
					require.LessOrEqual(t, st.TTL, claim, "the lease is the claim time until renewed")
					require.Eventually(t, func() bool {
						st, err := holder.Inspect(t.Context(), name)
						return err == nil && st.TTL > claim
					}, time.Minute, 5*time.Millisecond, "the renewer extends a handed lease to the TTL")
					// The local deadline moves with it once the renewal's
					// reply is in: the lease outlives the claim time (no
					// sleep needed to see it).
					require.Eventually(t, func() bool { return time.Until(reentrant.LocalDeadline(l)) > claim },
						time.Minute, 5*time.Millisecond, "the renewal moves the local deadline past the claim time")
					require.NoError(t, l.Err())
				} else {
					require.Greater(t, st.TTL, claim, "a claimed lease lasts the TTL")
				}
				require.NoError(t, l.Unlock(t.Context()))
			})
		}
	})
}

// subscribedHandoff is subscribedWaiter's handoff timeout.
const subscribedHandoff = 8 * time.Second

// waiting is a Lock call that waits behind another client's hold.
type waiting struct {
	holder       *reentrant.Client
	held         *reentrant.Lease
	name, prefix string
	got          <-chan *reentrant.Lease // the waiter's lease, once it returns
	n            *atomic.Int64           // acquire scripts answered to the waiter's client
}

// subscribedWaiter starts a Lock on a fresh name, held by a client of
// admin, from a client of its own that dials addr (named conn, unless
// empty), both with opts, and returns once the waiter queued and polled
// at its subscription's confirmation (n is 2 then). Acquire scripts are
// counted once answered: a poll counted when sent could still run after a
// release and take the lock itself. The timers leave time enough that no
// step of a test races one on a loaded machine: a 2 min TTL, a handoff
// timeout of subscribedHandoff, and waiter polls every minute, at the
// queue's keep-alive at the earliest (62 s).
func subscribedWaiter(t *testing.T, admin *redis.Client, addr, conn string, opts ...reentrant.ClientOption) waiting {
	t.Helper()
	w := waiting{n: new(atomic.Int64), prefix: testenv.Unique(t), name: testenv.Unique(t)}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ClientName: conn})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(testenv.Hook{Done: func(cmds []redis.Cmder, pipe bool, err error) {
		for _, cmd := range cmds {
			if !pipe && scripts.Ran("acquire", cmd, err) {
				w.n.Add(1)
			}
		}
	}})
	opts = append([]reentrant.ClientOption{reentrant.WithTTL(2 * time.Minute), reentrant.WithPrefix(w.prefix),
		reentrant.WithHandoffTimeout(subscribedHandoff)}, opts...)
	var waiter *reentrant.Client
	w.holder, waiter = newClient(t, admin, opts...), newClient(t, rdb, opts...)
	var err error
	w.held, err = w.holder.Lock(t.Context(), w.name)
	require.NoError(t, err)
	got := make(chan *reentrant.Lease, 1)
	go func() {
		l, err := waiter.Lock(t.Context(), w.name, reentrant.WithRetry(reentrant.LinearBackoff(time.Minute)))
		assert.NoError(t, err)
		got <- l
	}()
	w.got = got
	queued(t, w.holder, w.name, 1)
	// The subscription's confirmation wakes the waiter to poll once (a
	// handoff sent before it was subscribed is not missed): its first try
	// and that poll are the two acquire scripts it sends before a handoff.
	require.Eventually(t, func() bool { return w.n.Load() == 2 }, time.Minute, time.Millisecond,
		"the waiter's first try and the poll its subscription's confirmation wakes")
	return w
}

// handedByMessage releases held and checks that the waiter's Lock returns
// the next token without another acquire script: it took the lock from the
// handoff message.
func handedByMessage(t *testing.T, held *reentrant.Lease, got <-chan *reentrant.Lease, n *atomic.Int64) {
	t.Helper()
	before := n.Load()
	require.NoError(t, held.Unlock(t.Context()))
	l := <-got
	require.NotNil(t, l)
	require.Equal(t, before, n.Load(), "acquire scripts the waiter sent after the release")
	require.Greater(t, l.Token(), held.Token())
	require.NoError(t, l.Unlock(t.Context()))
}

// A client whose subscription's connection is killed (CLIENT KILL, a
// proxy's idle timeout, a server restart) subscribes again, wakes its
// waiters to poll once when the server confirms, and its waiters then take
// a handoff from its message again.
func TestHandoffAfterSubscriptionKilled(t *testing.T) {
	admin := testenv.Redis(t) // CLIENT KILL: a real server
	conn := testenv.Unique(t)
	w := subscribedWaiter(t, admin, testenv.RedisAddr(t), conn)
	held, got, n := w.held, w.got, w.n

	// The waiter's client has one subscribed connection, named conn.
	var ids []int64
	for line := range strings.Lines(admin.ClientList(t.Context()).Val()) {
		if strings.Contains(line, " name="+conn+" ") && !strings.Contains(line, " sub=0 ") {
			var id int64
			_, err := fmt.Sscanf(line, "id=%d ", &id)
			require.NoError(t, err)
			ids = append(ids, id)
		}
	}
	require.Len(t, ids, 1, "the waiter's client's subscribed connections")
	require.NoError(t, admin.ClientKillByFilter(t.Context(), "ID", fmt.Sprint(ids[0])).Err())
	require.Eventually(t, func() bool { return n.Load() == 3 }, time.Minute, time.Millisecond,
		"the poll the new subscription's confirmation wakes")
	handedByMessage(t, held, got, n)
}

// A waiter process SIGKILLed while queued, or frozen and then killed after
// the lock was handed to it, delays the next waiter by at most the handoff
// timeout (1 s by default), never by a TTL (30 s here): the lock handed to
// the dead waiter carries only the claim time (half the handoff timeout),
// and the next waiter's first poll after the claim has run out takes the
// lock; its polls come every quarter of the handoff timeout at most
// (TestPollDelayBounds). Both are asserted without the wall clock: the
// claim as Redis reports it, and the polls by when each was sent against
// when Redis's claim ran out, so that a loaded machine, which only makes
// the polls late, cannot fail the test.
func TestDeadWaiterDelaysNextByAtMostTheBound(t *testing.T) {
	t.Parallel() // see TestMain
	addr := testenv.RedisAddr(t)
	for _, when := range []string{"queued", "handed"} {
		t.Run(when, func(t *testing.T) {
			rdb := testenv.Redis(t)
			pfx := testenv.Unique(t)
			c := newClient(t, rdb, reentrant.WithPrefix(pfx))
			name := "dead-waiter"
			held, err := c.Lock(t.Context(), name)
			require.NoError(t, err)

			child := exec.Command(os.Args[0], "-test.run=^$")
			child.Env = append(os.Environ(), helperWaiterVar+"="+addr+"|"+pfx+"|"+name)
			child.Stderr = os.Stderr
			require.NoError(t, child.Start())
			t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
			queued(t, c, name, 1)

			// The next waiter, on a client of its own whose acquire calls
			// are recorded with the time each was sent.
			var (
				mu    sync.Mutex
				polls []time.Time
			)
			nrdb := testenv.Redis(t)
			nrdb.AddHook(testenv.Hook{Sent: func(cmds []redis.Cmder, pipe bool) {
				if !pipe && scripts.Runs("acquire", cmds[0].Args()) {
					mu.Lock()
					polls = append(polls, time.Now())
					mu.Unlock()
				}
			}})
			nc := newClient(t, nrdb, reentrant.WithPrefix(pfx))
			next := make(chan time.Time, 1)
			nextOwner := reentrant.NewOwner()
			go func() {
				l, err := nc.Lock(reentrant.WithOwner(t.Context(), nextOwner), name)
				if assertNoErr(t, err) {
					next <- time.Now()
					_ = l.Unlock(context.Background())
				}
			}()
			queued(t, c, name, 2)

			var start time.Time
			switch when {
			case "queued":
				require.NoError(t, child.Process.Signal(syscall.SIGKILL))
				start = time.Now()
				require.NoError(t, held.Unlock(t.Context()))
			case "handed":
				// Frozen, it cannot claim the lock handed to it; then killed.
				// SIGSTOP takes effect asynchronously: wait until the child
				// is stopped, or it might still claim the lock.
				require.NoError(t, child.Process.Signal(syscall.SIGSTOP))
				require.NoError(t, testenv.WaitStopped(child.Process.Pid, time.Minute))
				require.NoError(t, held.Unlock(t.Context()))
				start = time.Now()
			}
			// The release handed the lock to the dead waiter, for its claim
			// time only: the next token, leased for at most half the handoff
			// timeout. Redis's claim ends before claimed + st.TTL on this
			// machine's clock, which Redis shares. (Should this Inspect come
			// after the claim ended, on a machine stalled that long, the next
			// waiter holds the token after it already; the polls are then
			// not timed.)
			st, err := c.Inspect(t.Context(), name)
			claimed := time.Now()
			require.NoError(t, err)
			require.True(t, st.Held, "%+v", st)
			var claimEnd time.Time
			switch {
			case st.Token > held.Token() && st.Owner != string(nextOwner):
				// The dead waiter's unclaimed handoff.
				require.NotEqual(t, held.Owner(), reentrant.Owner(st.Owner))
				require.LessOrEqual(t, st.TTL, reentrant.DefaultHandoffTimeout/2, "a handed lock's lease is the claim time")
				claimEnd = claimed.Add(st.TTL)
			case st.Token > held.Token():
				t.Logf("Inspect came after the claim: the next waiter holds the lock already")
			default:
				t.Fatalf("the lock must be handed to the dead waiter: %+v (released token %d)", st, held.Token())
			}
			if when == "handed" {
				require.NoError(t, child.Process.Signal(syscall.SIGKILL))
			}

			select {
			case got := <-next:
				mu.Lock()
				defer mu.Unlock()
				late := 0
				for _, p := range polls {
					if !claimEnd.IsZero() && !p.Before(claimEnd) {
						late++
					}
				}
				t.Logf("next waiter got the lock %v after the dead one's turn began (claim %v, %d polls, %d sent after the claim ended)",
					got.Sub(start).Round(time.Millisecond), st.TTL, len(polls), late)
				require.LessOrEqual(t, late, 1, "the first poll after the claim ran out must take the lock")
			case <-time.After(reentrant.DefaultTTL):
				t.Fatal("the next waiter never got the lock")
			}
		})
	}
}

// A waiter whose poll finds the lock deleted by hand (DEL of the hash only:
// the flag q goes, the queue stays) takes it, and leaves the queue: its
// entry, left there, would later be handed the lock after its call had
// returned. Its first attempt queued it, so the poll says so (Again).
func TestPollTakingADeletedLockLeavesTheQueue(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, name := t.Context(), testenv.Unique(t)
		holder := newClient(t, b.Client)
		waiter := newClient(t, b.Client, reentrant.WithHandoffTimeout(200*time.Millisecond)) // polls every 50 ms
		held, err := holder.Lock(ctx, name)
		require.NoError(t, err)
		type result struct {
			l   *reentrant.Lease
			err error
		}
		got := make(chan result, 1)
		go func() {
			l, err := waiter.Lock(ctx, name)
			got <- result{l, err}
		}()
		queued(t, holder, name, 1)
		k := scripts.KeysFor(prefix, name)
		require.NoError(t, b.Client.Del(ctx, k.Lock).Err()) // the operator
		var r result
		select {
		case r = <-got:
		case <-time.After(30 * time.Second):
			t.Fatal("the waiter's polls never took the deleted lock")
		}
		require.NoError(t, r.err)
		require.Greater(t, r.l.Token(), held.Token())
		n, err := b.Client.ZCard(ctx, k.Queue).Result()
		require.NoError(t, err)
		require.Zero(t, n, "the waiter's entry must leave the queue")
		require.NoError(t, r.l.Unlock(ctx))
		require.ErrorIs(t, held.Unlock(ctx), reentrant.ErrNotHeld)
	})
}
