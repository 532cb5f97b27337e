//go:build unix

package reentrant_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// An uncontended Redlock Lock+Unlock of a new owner costs each node two
// requests: the grant carries the token (the proposal) and the release
// wakes waiters in its own script. A batch may cost more on a loaded
// machine (a node answering after the acquisition's grace, a proposal its
// clock passed), so the test waits for one batch that costs exactly that,
// with a generous ceiling.
func TestRedlockUncontendedRequests(t *testing.T) {
	t.Parallel() // see TestMain
	eachRedlock(t, 3, func(t *testing.T, s redlockSet) {
		// One request per command, one per pipeline.
		counts := make([]*atomic.Int64, len(s.nodes))
		for i, rdb := range s.nodes {
			n := new(atomic.Int64)
			counts[i] = n
			rdb.(*redis.Client).AddHook(testenv.Hook{Sent: func([]redis.Cmder, bool) { n.Add(1) }})
		}
		c := newRedlock(t, s.nodes)
		ctx := t.Context()
		pair := func(name string) {
			l, err := c.Lock(ctx, name)
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))
		}
		pair(testenv.Unique(t) + "-warm") // the eviction-policy check, the library load
		const pairs = 5
		var seen []string
		// At least 60 batches, and as many more as a minute and a half
		// allows: the ceiling of a condition, not a bound on the machine
		// (other tests' load makes more batches cost more).
		give := time.Now().Add(90 * time.Second)
		for batch := 0; batch < 60 || time.Now().Before(give); batch++ {
			time.Sleep(20 * time.Millisecond) // what an earlier batch left in the background
			before := make([]int64, len(counts))
			for i, n := range counts {
				before[i] = n.Load()
			}
			for p := range pairs {
				pair(fmt.Sprintf("%s-%d-%d", testenv.Unique(t), batch, p))
			}
			time.Sleep(20 * time.Millisecond)
			exact := true
			var got []int64
			for i, n := range counts {
				d := n.Load() - before[i]
				got = append(got, d)
				require.GreaterOrEqual(t, d, int64(2*pairs), "node %d: a grant and a release per pair at least", i)
				exact = exact && d == 2*pairs
			}
			if exact {
				return
			}
			if len(seen) < 60 {
				seen = append(seen, fmt.Sprint(got))
			}
		}
		t.Fatalf("no batch of %d pairs cost each node %d requests (the first 60: %v)", pairs, 2*pairs, seen)
	})
}

// A proposal some nodes refuse (their counter is above it, raised by hand
// here, as by a client whose clock runs ahead) still gives a token above
// every counter of the majority that granted it: taken by a majority, the
// proposal itself; otherwise a token above the refusing counters, to which
// the nodes that took the proposal are raised.
func TestRedlockProposalRefused(t *testing.T) {
	t.Parallel() // see TestMain
	eachRedlock(t, 3, func(t *testing.T, s redlockSet) {
		ctx := t.Context()
		// A lease far longer than the test's waits: a level left on a node
		// would show, not expire.
		c := newRedlock(t, s.nodes, reentrant.WithRejoinDelay(time.Hour))
		long := reentrant.WithTTL(10 * time.Minute)
		warm, err := c.Lock(ctx, testenv.Unique(t)+"-warm", long)
		require.NoError(t, err)
		require.NoError(t, warm.Unlock(ctx))
		ahead := fence.Token(time.Now().Add(time.Hour).UnixMicro())

		// Node 0's counter is above the proposal: nodes 1 and 2 take it,
		// unless one of them answers after the acquisition's grace (a
		// loaded machine); then the token is above node 0's counter. Both
		// are right; the test waits for a name that took the first way.
		var name string
		var k scripts.Keys
		var first fence.Token
		for try := 0; ; try++ {
			require.Less(t, try, 20, "no acquisition took the proposal on nodes 1 and 2")
			name = fmt.Sprintf("%s-%d", testenv.Unique(t), try)
			k = scripts.KeysFor(prefix, name)
			require.NoError(t, s.nodes[0].Set(ctx, k.Counter, ahead.String(), 0).Err())
			l, err := c.Lock(ctx, name, long)
			require.NoError(t, err)
			first = l.Token()
			require.NoError(t, l.Unlock(ctx))
			for i, rdb := range s.nodes {
				// Node 0 refused the proposal and granted the take
				// pending: its level goes with the acquisition or the
				// release, not with the lease's end.
				require.Eventually(t, func() bool {
					st, err := scripts.Inspect(ctx, rdb, k)
					return err == nil && !st.Held
				}, time.Minute, 5*time.Millisecond, "node %d is free", i)
			}
			if first < ahead {
				break
			}
			require.Greater(t, first, ahead, "above the refusing node's counter")
		}

		require.NoError(t, s.nodes[1].Set(ctx, k.Counter, (ahead+10).String(), 0).Err())
		l, err := c.Lock(ctx, name, long)
		require.NoError(t, err)
		tok := l.Token()
		require.Greater(t, tok, ahead, "above the counter of node 0, which refused the proposal")
		require.Greater(t, tok, first)
		// Nodes 0 and 1 refuse the proposal: the token is above the
		// counters of the majority that granted it. When node 1 answers
		// after the acquisition's grace (a loaded machine), that majority
		// is nodes 0 and 2, and node 1, whose counter is above the token,
		// never gets it: its late grant stays pending (no token) while the
		// lease lives. Otherwise the token is above node 1's counter too,
		// and every node holds it.
		holders, counters := []int{0, 1, 2}, []fence.Token{tok, tok, tok}
		if tok <= ahead+10 {
			t.Logf("node 1 was not in the majority: token %d, its counter %d", tok, ahead+10)
			holders, counters[1] = []int{0, 2}, ahead+10
			st, err := scripts.Inspect(ctx, s.nodes[1], k)
			require.NoError(t, err)
			require.True(t, (!st.Held || st.Pending) && st.Token == fence.None && st.Counter == ahead+10,
				"node 1 holds no token at or below its counter: %+v", st)
		}
		for _, i := range holders {
			require.Eventually(t, func() bool {
				st, err := scripts.Inspect(ctx, s.nodes[i], k)
				return err == nil && st.Held && st.Token == tok && !st.Pending
			}, time.Minute, 5*time.Millisecond, "node %d holds the token", i)
		}
		in, err := c.TryLock(l.Context(), name)
		require.NoError(t, err)
		require.Equal(t, tok, in.Token(), "a reentry keeps it")
		require.NoError(t, in.Unlock(ctx))
		require.NoError(t, l.Unlock(ctx))
		for i, rdb := range s.nodes {
			// Unlock returns once a majority released; the rest follow.
			require.Eventually(t, func() bool {
				st, err := scripts.Inspect(ctx, rdb, k)
				return err == nil && !st.Held && st.Counter == counters[i]
			}, time.Minute, 5*time.Millisecond, "node %d is free, its counter %d", i, counters[i])
		}
		l, err = c.Lock(ctx, name, long)
		require.NoError(t, err)
		require.Greater(t, l.Token(), tok)
		require.NoError(t, l.Unlock(ctx))
	})
}
