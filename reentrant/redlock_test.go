//go:build unix

package reentrant_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// redlockNodes starts n miniredis servers and returns them with a client of
// each, with 1 s timeouts and no retries: a closed server refuses at once,
// and a loaded machine does not turn slow answers into refusals.
func redlockNodes(t *testing.T, n int) ([]*miniredis.Miniredis, []redis.UniversalClient) {
	t.Helper()
	var mrs []*miniredis.Miniredis
	var rdbs []redis.UniversalClient
	for range n {
		mr := miniredis.RunT(t)
		o := &redis.Options{Addr: mr.Addr()}
		testenv.ShortTimeouts(time.Second, -1)(o)
		rdb := redis.NewClient(o)
		t.Cleanup(func() { _ = rdb.Close() })
		mrs, rdbs = append(mrs, mr), append(rdbs, rdb)
	}
	return mrs, rdbs
}

// redlockSet is the nodes of one Redlock, with a client of each.
type redlockSet struct {
	nodes []redis.UniversalClient
	down  func(i int) // node i is gone for good: connections are refused
	wipe  func(i int) // node i forgets everything, its counters included
}

// eachRedlock runs f as a subtest on n miniredis servers, on n
// redis-server processes and on n redis-server processes without Functions
// (the scripts go as EVALSHA): real nodes differ from miniredis in time,
// in timeouts and in how scripts run. Nodes go down by a kill (refused at
// once), never by a pause, so the clients' timeouts are 1 s.
func eachRedlock(t *testing.T, n int, f func(t *testing.T, s redlockSet)) {
	t.Run("miniredis", func(t *testing.T) {
		mrs, nodes := redlockNodes(t, n)
		f(t, redlockSet{nodes: nodes, down: func(i int) { mrs[i].Close() }, wipe: func(i int) { mrs[i].FlushAll() }})
	})
	t.Run("redis", func(t *testing.T) {
		eachScriptPath(t, func(t *testing.T, p scriptPath) {
			srvs, nodes := redlockProcsTimeout(t, n, time.Second, redisproc.WithArgs(p.args...))
			f(t, redlockSet{nodes: nodes, down: func(i int) { srvs[i].Kill() }, wipe: func(i int) {
				require.NoError(t, srvs[i].Client().FlushAll(context.Background()).Err())
			}})
		})
	})
}

// newRedlock returns a Redlock client on nodes, each given a join record
// from long ago first (the nodes the tests start are new, and a new node
// otherwise votes for nobody for a TTL: TestRedlockFreshNodeWaitsOnce). A
// node that does not answer is left as it is.
func newRedlock(t *testing.T, nodes []redis.UniversalClient, opts ...reentrant.ClientOption) *reentrant.Client {
	t.Helper()
	for _, rdb := range nodes {
		if c, ok := rdb.(*redis.Client); ok && c.Options().Addr == unreachableAddr {
			continue // nobody listens there

		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_ = rdb.SetNX(ctx, scripts.JoinedKey(prefix), "1", 0).Err()
		cancel()
	}
	c, err := reentrant.NewRedlock(nodes, append([]reentrant.ClientOption{reentrant.WithPrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestRedlockRefusesBadSetups(t *testing.T) {
	_, nodes := redlockNodes(t, 4)
	for _, n := range []int{0, 1, 2, 4} {
		_, err := reentrant.NewRedlock(nodes[:n])
		require.ErrorIs(t, err, reentrant.ErrInvalid, "%d nodes", n)
	}
	_, err := reentrant.NewRedlock([]redis.UniversalClient{nodes[0], nil, nodes[1]})
	require.ErrorIs(t, err, reentrant.ErrInvalid)
	for _, o := range []reentrant.ClientOption{reentrant.WithStrictTokens(), reentrant.WithHandoffTimeout(time.Second),
		reentrant.WithReplicaAck(1, 10*time.Millisecond)} {
		_, err := reentrant.NewRedlock(nodes[:3], o)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
	}
}

func TestRedlockTokensAndReentry(t *testing.T) {
	t.Parallel() // see TestMain
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			eachRedlock(t, n, func(t *testing.T, s redlockSet) {
				a, b := newRedlock(t, s.nodes), newRedlock(t, s.nodes)
				name := testenv.Unique(t)
				var last fence.Token
				for i := range 6 {
					c := []*reentrant.Client{a, b}[i%2]
					l, err := c.Lock(t.Context(), name)
					require.NoError(t, err)
					require.Greater(t, l.Token(), last, "tokens must increase across owners")
					last = l.Token()

					in, err := c.TryLock(l.Context(), name)
					if err != nil {
						// Seen twice with the CPU saturated, on 5 miniredis
						// nodes, before late grants waited for their lease
						// (TestRedlockLateGrants): say what each node held.
						for j, node := range s.nodes {
							st, ierr := scripts.Inspect(t.Context(), node, scripts.KeysFor(prefix, name))
							t.Logf("node %d: %+v %v", j, st, ierr)
						}
						t.Logf("lease: token %d owner %s", l.Token(), l.Owner())
					}
					require.NoError(t, err)
					require.Equal(t, l.Token(), in.Token(), "reentry keeps the token")
					require.EqualValues(t, 2, in.Depth())
					_, err = []*reentrant.Client{b, a}[i%2].TryLock(t.Context(), name)
					require.ErrorIs(t, err, reentrant.ErrNotAcquired)

					st, err := c.Inspect(t.Context(), name)
					require.NoError(t, err)
					require.True(t, st.Held)
					require.Equal(t, l.Token(), st.Token)
					require.EqualValues(t, 2, st.Depth)

					require.NoError(t, l.Extend(t.Context(), time.Second))
					require.NoError(t, in.Unlock(t.Context()))
					require.NoError(t, l.Unlock(t.Context()))
					require.ErrorIs(t, l.Err(), reentrant.ErrReleased)
				}
				st, err := a.Inspect(t.Context(), name)
				require.NoError(t, err)
				require.False(t, st.Held)
				// At least the last token handed out, and above it when the
				// other client's refused TryLock reached a node before the
				// last Lock's own request there (that Lock returned on a
				// majority): the node took the proposal, raising its
				// counter, and gave the hold back.
				require.GreaterOrEqual(t, st.LastToken, last)
			})
		})
	}
}

func TestRedlockMinorityDown(t *testing.T) {
	t.Parallel() // see TestMain
	eachRedlock(t, 5, func(t *testing.T, s redlockSet) {
		// Renewed every 100 ms: a loaded machine has 800 ms of room to
		// send each renewal before the local deadline ends the lease.
		c := newRedlock(t, s.nodes, reentrant.WithTTL(time.Second), reentrant.WithRenewInterval(100*time.Millisecond))
		name := testenv.Unique(t)
		l, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
		s.down(1)
		s.down(3)
		l2, err := c.Lock(t.Context(), name)
		require.NoError(t, err, "two of five down: a majority remains")
		require.Greater(t, l2.Token(), l.Token())
		waitRenewed(t, l2, time.Second) // past its TTL, through the majority
		require.NoError(t, l2.Unlock(t.Context()))

		s.down(4)
		_, err = c.TryLock(t.Context(), name)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired, "three of five down")
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = c.Lock(ctx, name)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
		testenv.Within(t, time.Since(start), 300*time.Millisecond+reentrant.CleanupBudget, "Lock with three of five down")
	})
}

// A node that forgets everything (its counter included), at any moment,
// does not make tokens repeat or go backwards, even when the token lives
// on a bare majority of which it is one.
func TestRedlockForgetfulNode(t *testing.T) {
	eachRedlock(t, 3, func(t *testing.T, s redlockSet) {
		c := newRedlock(t, s.nodes)
		name := testenv.Unique(t)
		var last fence.Token
		for i := range 12 {
			if i%3 == 2 {
				// At once, whatever is still in flight: the nodes' clocks keep
				// the next token above the last even when the node flushed was
				// one of a bare majority that remembered it.
				s.wipe(i % 3)
			}
			l, err := c.Lock(t.Context(), name)
			require.NoError(t, err)
			require.Greater(t, l.Token(), last)
			last = l.Token()
			require.NoError(t, l.Unlock(t.Context()))
		}
	})
}

// A lease whose nodes all expire it is lost through its context.
func TestRedlockLossReported(t *testing.T) {
	eachRedlock(t, 3, func(t *testing.T, s redlockSet) {
		// Renewed every 200 ms, with a TTL no loaded scheduler outlasts: the
		// first renewal after the wipe comes back, saying gone, long before
		// the local deadline could end the lease as unconfirmed.
		const renew = 200 * time.Millisecond
		c := newRedlock(t, s.nodes, reentrant.WithTTL(time.Minute), reentrant.WithRenewInterval(renew))
		name := testenv.Unique(t)
		l, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		// Lock returns once a majority granted; the last node's grant may
		// still be on its way, and landing after the wipe it would make
		// the ownership whole again on a majority (rightly: the lease goes
		// on). So the test waits for it (10 s at most: it may also have
		// been refused and undone), then wipes every holder but one: the
		// one left says held, a majority says gone.
		holders := func() (in []int) {
			for i, n := range s.nodes {
				st, err := scripts.Inspect(t.Context(), n, scripts.KeysFor(prefix, name))
				if err == nil && st.Held && st.Token == l.Token() {
					in = append(in, i)
				}
			}
			return in
		}
		var held []int
		testenv.Await(10*time.Second, func() bool { held = holders(); return len(held) == len(s.nodes) })
		require.GreaterOrEqual(t, len(held), 2, "Lock returned without a majority holding: %v", held)
		for _, i := range held[:len(held)-1] {
			s.wipe(i)
		}
		wiped := time.Now()
		select {
		case <-l.Done():
		case <-time.After(time.Minute): // a ceiling; the bound is checked below
			t.Fatal("the lease was not reported lost")
		}
		// No renewal sent after the wipe can be confirmed, so the lease
		// ends at its next renewal, within a renew interval of it.
		testenv.Within(t, time.Since(wiped), renew, "the loss after the ownership left a majority")
		require.ErrorIs(t, l.Err(), reentrant.ErrGone, "a majority says the ownership is gone")
		require.ErrorIs(t, l.Unlock(t.Context()), reentrant.ErrNotHeld)
	})
}

// Clients contending on one name (votes split, attempts undone and
// retried) get unique, increasing tokens and never hold it at once.
func TestRedlockContention(t *testing.T) {
	t.Parallel() // see TestMain
	eachRedlock(t, 3, func(t *testing.T, s redlockSet) {
		name := testenv.Unique(t)
		type hold struct {
			tok        fence.Token
			start, end time.Time
		}
		var mu sync.Mutex
		var holds []hold
		var wg sync.WaitGroup
		for range 4 {
			c := newRedlock(t, s.nodes, reentrant.WithTTL(2*time.Second))
			wg.Go(func() {
				for range 8 {
					ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
					l, err := c.Lock(ctx, name)
					cancel()
					if !assert.NoError(t, err) {
						return
					}
					start := time.Now()
					time.Sleep(time.Millisecond)
					end := time.Now()
					assert.NoError(t, l.Unlock(t.Context()))
					mu.Lock()
					holds = append(holds, hold{l.Token(), start, end})
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.Len(t, holds, 32)
		slices.SortFunc(holds, func(a, b hold) int { return a.start.Compare(b.start) })
		for i := 1; i < len(holds); i++ {
			require.Greater(t, holds[i].tok, holds[i-1].tok, "tokens must increase in the order of the holds")
			require.False(t, holds[i].start.Before(holds[i-1].end), "holds %d and %d overlap", i-1, i)
		}
	})
}

// WithMaxDepth bounds a Redlock hold as it does one node's; the refused
// level is undone everywhere, and the lease goes on.
func TestRedlockTooDeep(t *testing.T) {
	eachRedlock(t, 3, func(t *testing.T, s redlockSet) {
		c := newRedlock(t, s.nodes, reentrant.WithMaxDepth(1))
		name := testenv.Unique(t)
		l, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		_, err = c.Lock(l.Context(), name)
		require.ErrorIs(t, err, reentrant.ErrTooDeep)
		require.NoError(t, l.Err())
		require.NoError(t, l.Unlock(t.Context()))
		st, err := c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.False(t, st.Held)
	})
}

// ForceUnlock on a Redlock ends the ownership on a majority: the holder's
// lease ends with ErrGone at its next renewal and the next holder gets a
// higher token; a free lock has nothing to force.
func TestRedlockForceUnlock(t *testing.T) {
	eachRedlock(t, 3, func(t *testing.T, s redlockSet) {
		// Renewed every 200 ms, with a TTL no loaded scheduler outlasts:
		// only the renewal that finds it forced can end the lease.
		holder := newRedlock(t, s.nodes, reentrant.WithTTL(time.Minute), reentrant.WithRenewInterval(200*time.Millisecond))
		ops := newRedlock(t, s.nodes, reentrant.WithIdentity("ops"))
		name := testenv.Unique(t)
		l, err := holder.Lock(t.Context(), name)
		require.NoError(t, err)
		tok, err := ops.ForceUnlock(t.Context(), name, fence.None)
		require.NoError(t, err)
		require.Equal(t, l.Token(), tok)
		select {
		case <-l.Done():
		case <-time.After(20 * time.Second):
			t.Fatal("the forced lease never ended")
		}
		require.ErrorIs(t, l.Err(), reentrant.ErrGone)
		next, err := ops.TryLock(t.Context(), name)
		require.NoError(t, err)
		require.Greater(t, next.Token(), tok)
		require.NoError(t, next.Unlock(t.Context()))
		_, err = ops.ForceUnlock(t.Context(), name, fence.None)
		require.ErrorIs(t, err, reentrant.ErrNotHeld)
	})
}

// A Redlock waiter tries again as soon as a release is published on the
// nodes. Its poll delay (LinearBackoff of an hour) is far longer than its
// context, so a waiter on another client can acquire only because the
// release (Unlock, or an operator's ForceUnlock) woke it. Once it holds the
// lock, no client listens on the name's wake channel on any node.
func TestRedlockWaiterWokenByRelease(t *testing.T) {
	eachRedlock(t, 3, func(t *testing.T, s redlockSet) {
		for _, how := range []string{"unlock", "force"} {
			t.Run(how, func(t *testing.T) {
				name := testenv.Unique(t)
				channel := scripts.KeysFor(prefix, name).Lock + ":w"
				listeners := func() (n int64) {
					for _, rdb := range s.nodes {
						m, err := rdb.PubSubNumSub(t.Context(), channel).Result()
						require.NoError(t, err)
						n += m[channel]
					}
					return n
				}
				holder := newRedlock(t, s.nodes)
				waiter := newRedlock(t, s.nodes, reentrant.WithRetry(reentrant.LinearBackoff(time.Hour)))
				held, err := holder.Lock(t.Context(), name)
				require.NoError(t, err)

				type result struct {
					l   *reentrant.Lease
					err error
				}
				got := make(chan result, 1)
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				go func() {
					l, err := waiter.Lock(ctx, name)
					got <- result{l, err}
				}()
				require.True(t, testenv.Await(30*time.Second, func() bool { return listeners() == 3 }),
					"the waiter never listened on every node")
				select {
				case r := <-got:
					t.Fatalf("the waiter returned while the lock was held: %v", r.err)
				default:
				}
				switch how {
				case "unlock":
					require.NoError(t, held.Unlock(t.Context()))
				case "force":
					tok, err := holder.ForceUnlock(t.Context(), name, fence.None)
					require.NoError(t, err)
					require.Equal(t, held.Token(), tok)
				}
				r := <-got
				require.NoError(t, r.err, "only a wake could have let the waiter acquire before its context ended")
				require.Greater(t, r.l.Token(), held.Token())
				require.True(t, testenv.Await(30*time.Second, func() bool { return listeners() == 0 }),
					"the wake channel is still listened on after the wait")
				require.NoError(t, r.l.Unlock(t.Context()))
			})
		}
	})
}

// heldGrants holds back a node's qacquire.lua calls (phase 1) while armed,
// before they are sent, so that the test decides when the grant lands:
// after the attempt was decided by the other nodes, after an Unlock.
type heldGrants struct {
	mu    sync.Mutex
	gate  chan struct{} // closed to let the held call go; nil: not armed
	held  chan struct{} // receives when a call is held
	ran   chan error    // the held call's outcome
	armed bool
}

func holdGrants(t *testing.T, node redis.UniversalClient) (*heldGrants, redis.UniversalClient) {
	t.Helper()
	h := &heldGrants{held: make(chan struct{}, 1), ran: make(chan error, 1)}
	o := &redis.Options{Addr: node.(*redis.Client).Options().Addr}
	testenv.ShortTimeouts(time.Second, -1)(o)
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	// Every call an FCALL (or EVALSHA) that runs: no load to tell apart.
	require.NoError(t, scripts.Load(t.Context(), rdb))
	isGrant := func(cmds []redis.Cmder, pipe bool) bool {
		return !pipe && scripts.Runs("qacquire", cmds[0].Args())
	}
	var mine sync.Map // the held commands, to report their outcome
	rdb.AddHook(testenv.Hook{
		Sent: func(cmds []redis.Cmder, pipe bool) {
			if !isGrant(cmds, pipe) {
				return
			}
			h.mu.Lock()
			gate := h.gate
			if gate != nil {
				h.gate = nil // one call only
				mine.Store(cmds[0], true)
			}
			h.mu.Unlock()
			if gate != nil {
				h.held <- struct{}{}
				<-gate
			}
		},
		Done: func(cmds []redis.Cmder, _ bool, err error) {
			if _, ok := mine.LoadAndDelete(cmds[0]); ok {
				h.ran <- err
			}
		},
	})
	return h, rdb
}

// arm holds the next grant; the returned func lets it go and waits until it
// ran, failing the test unless it did without error.
func (h *heldGrants) arm(t *testing.T) (release func()) {
	gate := make(chan struct{})
	h.mu.Lock()
	h.gate = gate
	h.mu.Unlock()
	return func() {
		t.Helper()
		select {
		case <-h.held:
		case <-time.After(10 * time.Second):
			t.Fatal("no grant was held")
		}
		close(gate)
		select {
		case err := <-h.ran:
			require.NoError(t, err, "the premise: the held grant runs on the node")
		case <-time.After(10 * time.Second):
			t.Fatal("the held grant never ran")
		}
	}
}

// A grant that reaches a node after the attempt was decided by the others
// is kept while the lease it belongs to lives and undone once that lease
// is unlocked, whether the grant is a fresh hold (pending) or a reentry's
// level: a level left behind would hold the node for the owner until its
// TTL ran out, so that later acquisitions and reentries on a Redlock
// without a spare node were refused (seen as a flaky reentry on 5 nodes,
// and as the demo's reentry timing out on 3).
func TestRedlockLateGrants(t *testing.T) {
	const ttl = 30 * time.Second // the window (the grants' deadline) is far off
	state := func(t *testing.T, node redis.UniversalClient, name string) scripts.State {
		st, err := scripts.Inspect(t.Context(), node, scripts.KeysFor(prefix, name))
		require.NoError(t, err)
		return st
	}
	awaitState := func(t *testing.T, node redis.UniversalClient, name, want string, ok func(scripts.State) bool) {
		t.Helper()
		var st scripts.State
		if !testenv.Await(10*time.Second, func() bool { st = state(t, node, name); return ok(st) }) {
			t.Fatalf("the late node never came to %s: %+v", want, st)
		}
	}
	heldBy := func(tok fence.Token, depth int64) func(scripts.State) bool {
		return func(st scripts.State) bool { return st.Held && !st.Pending && st.Token == tok && st.Depth == depth }
	}
	free := func(st scripts.State) bool { return !st.Held }

	eachRedlock(t, 3, func(t *testing.T, s redlockSet) {
		h, late := holdGrants(t, s.nodes[2])
		nodes := []redis.UniversalClient{s.nodes[0], s.nodes[1], late}
		c := newRedlock(t, nodes, reentrant.WithTTL(ttl))

		t.Run("fresh, kept while its lease lives", func(t *testing.T) {
			name := testenv.Unique(t)
			let := h.arm(t)
			l, err := c.Lock(t.Context(), name)
			require.NoError(t, err)
			let()
			awaitState(t, s.nodes[2], name, "hold the lease's token", heldBy(l.Token(), 1))
			require.NoError(t, l.Unlock(t.Context()))
			awaitState(t, s.nodes[2], name, "be free", free)
		})

		t.Run("fresh, landing after Unlock", func(t *testing.T) {
			name := testenv.Unique(t)
			let := h.arm(t)
			l, err := c.Lock(t.Context(), name)
			require.NoError(t, err)
			require.NoError(t, l.Unlock(t.Context()))
			let()
			awaitState(t, s.nodes[2], name, "be free", free)
			// At least the token: a late grant may have taken the
			// attempt's proposal where the attempt chose another token
			// (the majority refused it), which it then cannot lower; the
			// proposal was never handed out, and only raised the counter.
			require.GreaterOrEqual(t, state(t, s.nodes[2], name).Counter, l.Token(), "the node remembers the token")
		})

		t.Run("reentry, landing after its Unlock", func(t *testing.T) {
			name := testenv.Unique(t)
			outer, err := c.Lock(t.Context(), name)
			require.NoError(t, err)
			awaitState(t, s.nodes[2], name, "hold the lease's token", heldBy(outer.Token(), 1))
			let := h.arm(t)
			inner, err := c.TryLock(outer.Context(), name)
			require.NoError(t, err)
			require.NoError(t, inner.Unlock(t.Context()))
			let()
			awaitState(t, s.nodes[2], name, "hold only the outer level", heldBy(outer.Token(), 1))
			require.NoError(t, outer.Unlock(t.Context()))
			awaitState(t, s.nodes[2], name, "be free", free)

			// The owner and another can take it again at once.
			again, err := c.TryLock(context.WithoutCancel(outer.Context()), name)
			require.NoError(t, err)
			require.NoError(t, again.Unlock(t.Context()))
		})
	})
}

// A reentry still succeeds when the first majority to answer is one node
// that holds the ownership and one where its hold is gone while the node's
// counter already reached the token (an operator deleted the hash there,
// or the hold expired on that node alone): the token is the ownership's
// own, so the second node is raised to it and the reentry keeps it.
func TestRedlockReentryWhereTheHoldIsGone(t *testing.T) {
	eachRedlock(t, 3, func(t *testing.T, s redlockSet) {
		h, late := holdGrants(t, s.nodes[2])
		c := newRedlock(t, []redis.UniversalClient{s.nodes[0], s.nodes[1], late}, reentrant.WithTTL(30*time.Second))
		name := testenv.Unique(t)
		k := scripts.KeysFor(prefix, name)
		outer, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		for i, node := range s.nodes {
			require.True(t, testenv.Await(10*time.Second, func() bool {
				st, err := scripts.Inspect(t.Context(), node, k)
				return err == nil && st.Held && !st.Pending && st.Token == outer.Token()
			}), "node %d never held the token", i)
		}
		// Node 0 forgets the hold and keeps its counter, which is the token.
		require.NoError(t, s.nodes[0].Del(t.Context(), k.Lock).Err())
		counter, err := s.nodes[0].Get(t.Context(), k.Counter).Uint64()
		require.NoError(t, err)
		require.Equal(t, uint64(outer.Token()), counter, "the premise: the counter holds the token")

		let := h.arm(t) // node 2 answers after nodes 0 and 1 decided
		inner, err := c.TryLock(outer.Context(), name)
		let() // before any assertion: a held grant would keep Close waiting
		require.NoError(t, err, "one holding node and one whose counter is the token make a majority")
		require.Equal(t, outer.Token(), inner.Token())
		require.Equal(t, int64(2), inner.Depth())
		st, err := scripts.Inspect(t.Context(), s.nodes[0], k)
		require.NoError(t, err)
		require.True(t, st.Held && !st.Pending && st.Token == outer.Token(), "node 0 holds the token again: %+v", st)

		require.NoError(t, inner.Unlock(t.Context()))
		require.NoError(t, outer.Unlock(t.Context()))
		for i, node := range s.nodes {
			require.True(t, testenv.Await(10*time.Second, func() bool {
				st, err := scripts.Inspect(t.Context(), node, k)
				return err == nil && !st.Held
			}), "node %d still holds the lock", i)
		}
	})
}

// redlockProcs starts n redis-servers and returns them with a client of
// each with short, context-honouring timeouts.
func redlockProcs(t *testing.T, n int) ([]*redisproc.Server, []redis.UniversalClient) {
	return redlockProcsTimeout(t, n, 200*time.Millisecond)
}

// redlockProcsTimeout is redlockProcs with client timeouts of d, each
// server started with opts.
func redlockProcsTimeout(t *testing.T, n int, d time.Duration, opts ...redisproc.Option) ([]*redisproc.Server, []redis.UniversalClient) {
	t.Helper()
	var srvs []*redisproc.Server
	var nodes []redis.UniversalClient
	for range n {
		s := redisproc.Start(t, opts...)
		srvs = append(srvs, s)
		nodes = append(nodes, s.Client(testenv.ShortTimeouts(d, -1)))
	}
	return srvs, nodes
}

// SIGSTOP one of 3 and two of 5: still acquired, renewed and released
// through the majority; a majority stopped: Lock fails with ErrNotAcquired
// when its context ends.
func TestRedlockPausedNodes(t *testing.T) {
	t.Parallel() // see TestMain
	for _, n := range []int{3, 5} {
		srvs, nodes := redlockProcs(t, n)
		// Renewed every 100 ms (each renewal waits out the stopped nodes'
		// 200 ms timeouts), with 800 ms to spare: see renewalTTL.
		const ttl = 1200 * time.Millisecond
		c := newRedlock(t, nodes, reentrant.WithTTL(ttl), reentrant.WithRenewInterval(100*time.Millisecond))
		name := testenv.Unique(t)
		first, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		require.NoError(t, first.Unlock(t.Context()))

		for _, s := range srvs[:n/2] {
			s.Pause()
		}
		l, err := c.Lock(t.Context(), name)
		require.NoError(t, err, "%d of %d stopped", n/2, n)
		require.Greater(t, l.Token(), first.Token())
		in, err := c.Lock(l.Context(), name)
		require.NoError(t, err)
		require.Equal(t, l.Token(), in.Token(), "reentry keeps the token")
		waitRenewed(t, l, ttl) // past its TTL, through the majority
		require.NoError(t, in.Unlock(t.Context()))
		require.NoError(t, l.Unlock(t.Context()))

		srvs[n/2].Pause() // now a majority is stopped
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		start := time.Now()
		_, err = c.Lock(ctx, name)
		cancel()
		// The stopped nodes run the attempt when they resume: its outcome
		// is unknown, and it is undone in the background.
		require.ErrorIs(t, err, reentrant.ErrOutcomeUnknown)
		require.NotErrorIs(t, err, reentrant.ErrNotAcquired)
		require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
		testenv.Within(t, time.Since(start), 500*time.Millisecond+reentrant.CleanupBudget, "Lock with a majority stopped")
		for _, s := range srvs[:n/2+1] {
			s.Resume()
		}
		l, err = c.Lock(t.Context(), name)
		require.NoError(t, err)
		require.Greater(t, l.Token(), first.Token())
		require.NoError(t, l.Unlock(t.Context()))
	}
}

// A node SIGKILLed and restarted without AOF (its counter gone) at any
// moment, a lock held or not, the others having learned the last token or
// not: tokens never repeat and keep rising.
func TestRedlockRestartWithoutAOF(t *testing.T) {
	t.Parallel() // see TestMain
	eachScriptPath(t, testRedlockRestartWithoutAOF)
}

// testRedlockRestartWithoutAOF is its test, on nodes that run the scripts
// as p says: a restarted node has lost the library, or the scripts.
func testRedlockRestartWithoutAOF(t *testing.T, p scriptPath) {
	srvs, nodes := redlockProcsTimeout(t, 3, 200*time.Millisecond, redisproc.WithArgs(p.args...))
	// A restarted node votes again a TTL (and its drift allowance) later.
	a, b := newRedlock(t, nodes, reentrant.WithTTL(2*time.Second)), newRedlock(t, nodes, reentrant.WithTTL(2*time.Second))
	name := testenv.Unique(t)
	var last fence.Token
	for i := range 12 {
		l, err := []*reentrant.Client{a, b}[i%2].Lock(t.Context(), name)
		require.NoError(t, err)
		require.Greater(t, l.Token(), last, "token %d after %d", l.Token(), last)
		last = l.Token()
		err = nil
		if i%3 == 1 { // while held, right after the grant
			srvs[i%3].Crash(0)
			// The grant may have reached a bare majority including the
			// killed node: then the ownership is gone, and Unlock says so.
			if err = l.Unlock(t.Context()); errors.Is(err, reentrant.ErrNotHeld) {
				err = nil
			}
		} else {
			err = l.Unlock(t.Context())
		}
		require.NoError(t, err)
		if i%3 == 2 { // right after the release, before any bump settles
			srvs[i%3].Crash(0)
		}
	}
}

// unreachableAddr is where nobody listens.
const unreachableAddr = "127.0.0.1:1"

// unreachable is a Redlock node nobody listens at: every call to it fails
// at once, as to a node behind a partition.
func unreachable(t *testing.T) redis.UniversalClient {
	rdb := redis.NewClient(&redis.Options{Addr: unreachableAddr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// The scenario of Kleppmann's critique, on real processes: a client that
// cannot reach C takes and releases the lock on {A, B}; B is SIGKILLed and
// restarted empty; a client that cannot reach A then takes the lock on
// {B, C}, which never saw the token. It must get a higher token, once B has
// rejoined (a TTL after its restart, so that the lease it forgot has run
// out), whether it asks at once or seconds later.
func TestRedlockRestartEmptyBehindAPartition(t *testing.T) {
	t.Parallel() // see TestMain
	for _, wait := range []time.Duration{0, 2 * time.Second} {
		srvs, nodes := redlockProcs(t, 3)
		name := testenv.Unique(t)
		ttl := reentrant.WithTTL(2 * time.Second)
		noC := newRedlock(t, []redis.UniversalClient{nodes[0], nodes[1], unreachable(t)}, ttl)
		noA := newRedlock(t, []redis.UniversalClient{unreachable(t), nodes[1], nodes[2]}, ttl)
		var first fence.Token
		for range 4 {
			l, err := noC.Lock(t.Context(), name)
			require.NoError(t, err)
			require.Greater(t, l.Token(), first)
			first = l.Token()
			require.NoError(t, l.Unlock(t.Context()))
		}
		require.Empty(t, nodes[2].Get(t.Context(), scripts.KeysFor(prefix, name).Counter).Val(), "C never saw a token")
		srvs[1].Crash(0)
		require.Empty(t, nodes[1].Get(t.Context(), scripts.KeysFor(prefix, name).Counter).Val(), "B restarted empty")
		time.Sleep(wait)
		l, err := noA.Lock(t.Context(), name)
		require.NoError(t, err)
		require.Greater(t, l.Token(), first, "restarted %v ago: only A remembers %d, and A is out of reach", wait, first)
		require.NoError(t, l.Unlock(t.Context()))
	}
}

// sendClock is a go-redis hook that records, for pipelines that returned
// without error, the latest time one was sent: a bound from above on when
// the last renewal a node confirmed left this process.
type sendClock struct {
	mu        sync.Mutex
	confirmed time.Time
}

func (s *sendClock) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (s *sendClock) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (s *sendClock) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		sent := time.Now()
		err := next(ctx, cmds)
		if err == nil {
			s.mu.Lock()
			if sent.After(s.confirmed) {
				s.confirmed = sent
			}
			s.mu.Unlock()
		}
		return err
	}
}

func (s *sendClock) last() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.confirmed
}

// A majority of real nodes SIGSTOPped, with go-redis's default options
// (which ignore context deadlines on reads and retry): the Redlock lease
// still ends by its local timer, with ErrUnconfirmed, before any node could
// expire the ownership: within the TTL of the last renewal a node confirmed,
// the safety margin and drift allowance being the scheduler's room.
func TestRedlockLossBoundWhileAMajorityIsStopped(t *testing.T) {
	t.Parallel() // see TestMain
	const ttl = 3 * time.Second
	var srvs []*redisproc.Server
	var nodes []redis.UniversalClient
	clock := &sendClock{}
	for i := range 3 {
		s := redisproc.Start(t)
		srvs = append(srvs, s)
		rdb := s.Client() // default options
		if i < 2 {
			// The nodes to be stopped: a renewal confirmed by a majority
			// was confirmed by one of them.
			rdb.AddHook(clock)
		}
		nodes = append(nodes, rdb)
	}
	renewed := make(chan struct{}, 16)
	lost := make(chan time.Time, 1)
	obs := newRedlock(t, nodes, reentrant.WithTTL(ttl), reentrant.WithObserver(func(e reentrant.Event) {
		switch e.Kind {
		case reentrant.Renewed:
			select {
			case renewed <- struct{}{}:
			default:
			}
		case reentrant.Lost:
			lost <- time.Now()
		}
	}))
	l, err := obs.Lock(t.Context(), testenv.Unique(t))
	require.NoError(t, err)
	select {
	case <-renewed: // a renewal was confirmed: the deadline now follows renewals
	case <-time.After(20 * ttl):
		t.Fatal("no renewal was confirmed")
	}
	srvs[0].Pause()
	srvs[1].Pause()
	defer srvs[1].Resume() // before Close, which waits for the calls in flight
	defer srvs[0].Resume()
	paused := time.Now()
	var at time.Time
	select {
	case at = <-lost:
	case <-time.After(20 * ttl):
		t.Fatal("the lease was never reported lost")
	}
	require.ErrorIs(t, l.Err(), reentrant.ErrUnconfirmed)
	last := clock.last()
	require.True(t, last.Before(paused), "no pipeline may be confirmed by a stopped node")
	// The promise is the deadline the lease computed, and that it ended
	// once that passed; how late the timer's goroutine ran after it is the
	// scheduler's.
	dl := reentrant.LocalDeadline(l)
	require.False(t, at.Before(dl), "the lease ended before its deadline %v", dl)
	require.Less(t, dl.Sub(last), ttl,
		"the lease must end before any node could expire the ownership (last confirmed send %v before the pause)", paused.Sub(last))
}

// A node without a join record (new, or restarted without its data) votes
// for nobody for the rejoin delay: a new Redlock's first acquisition waits
// that long, once; later ones do not. A TTL longer than the delay covers is
// refused, as is WithRejoinDelay on New or below the TTL.
func TestRedlockFreshNodeWaitsOnce(t *testing.T) {
	t.Parallel() // see TestMain
	_, nodes := redlockProcs(t, 3)
	const ttl = 2 * time.Second
	c, err := reentrant.NewRedlock(nodes, reentrant.WithPrefix(prefix), reentrant.WithTTL(ttl))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	name := testenv.Unique(t)
	_, err = c.TryLock(t.Context(), name)
	require.ErrorIs(t, err, reentrant.ErrNotAcquired, "new nodes are joining")
	start := time.Now()
	l, err := c.Lock(t.Context(), name)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), ttl/2, "the first acquisition waits for the nodes to join")
	require.NoError(t, l.Unlock(t.Context()))
	l, err = c.TryLock(t.Context(), name)
	require.NoError(t, err, "joined: no wait any more")
	require.NoError(t, l.Unlock(t.Context()))

	_, err = c.TryLock(t.Context(), name, reentrant.WithTTL(ttl+time.Second))
	require.ErrorIs(t, err, reentrant.ErrInvalid, "a lease the rejoin delay does not cover")
	long, err := reentrant.NewRedlock(nodes, reentrant.WithPrefix(prefix), reentrant.WithTTL(ttl), reentrant.WithRejoinDelay(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { _ = long.Close() })
	_, err = long.TryLock(t.Context(), name)
	require.ErrorIs(t, err, reentrant.ErrNotAcquired, "the nodes joined 2 s ago: a minute's delay has not passed")
	for _, rdb := range nodes { // as an operator may for a node known to have granted nothing
		require.NoError(t, rdb.Set(t.Context(), scripts.JoinedKey(prefix), "1", 0).Err())
	}
	l, err = long.TryLock(t.Context(), name, reentrant.WithTTL(30*time.Second))
	require.NoError(t, err, "WithRejoinDelay covers longer leases")
	require.NoError(t, l.Unlock(t.Context()))

	_, err = reentrant.NewRedlock(nodes, reentrant.WithTTL(ttl), reentrant.WithRejoinDelay(ttl))
	require.ErrorIs(t, err, reentrant.ErrInvalid, "no room for the drift allowance")
	_, err = reentrant.New(nodes[0], reentrant.WithRejoinDelay(time.Minute))
	require.ErrorIs(t, err, reentrant.ErrInvalid, "New has no rejoin")
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{unreachableAddr}})
	defer cluster.Close()
	_, err = reentrant.NewRedlock([]redis.UniversalClient{nodes[0], nodes[1], cluster})
	require.ErrorIs(t, err, reentrant.ErrInvalid, "a Cluster is not one node")
}
