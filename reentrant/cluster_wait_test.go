//go:build unix

package reentrant_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/hashslot"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/redisproc"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

// clusterHandoff is how long waiters here may take to be handed a lock:
// the handoff timeout is 4 s, so they poll only every second, and a
// waiter woken sooner was woken by its message.
const clusterHandoff = 4 * time.Second

// Waiters on locks held on every primary are woken by their handoff
// message. On Redis 7 each release sends one SPUBLISH, on the lock's own
// primary, and no PUBLISH anywhere: nothing is broadcast.
func TestClusterWaitersOnEveryMaster(t *testing.T) {
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{})
	r := runClusterHandoffs(t, c, 2, true)
	for _, m := range c.Masters() {
		assert.Equal(t, r.handoffs[m], commandCalls(t, m, "spublish"), "%s: one SPUBLISH per handoff", m.Addr())
		assert.Zero(t, commandCalls(t, m, "publish"), "%s: no PUBLISH", m.Addr())
		assert.Equal(t, r.slots[m], commandCalls(t, m, "ssubscribe"), "%s: the waiters' client subscribes once per slot", m.Addr())
	}
	assert.Zero(t, r.bus["publish"], "nothing broadcast on the cluster bus")
	t.Logf("SUMMARY cluster-wait pubsub=sharded %s", r)
}

// Without sharded pub/sub (a server before Redis 7, played here by one
// whose SPUBLISH and SSUBSCRIBE are renamed away), the client finds out
// once and falls back to its classic channel: one PUBLISH per handoff,
// which the cluster bus then carries to every node.
func TestClusterWithoutShardedPubSub(t *testing.T) {
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{
		Args: []string{"--rename-command", "SPUBLISH", "", "--rename-command", "SSUBSCRIBE", ""}})
	r := runClusterHandoffs(t, c, 1, false)
	for _, m := range c.Masters() {
		assert.Equal(t, r.handoffs[m], commandCalls(t, m, "publish"), "%s: one PUBLISH per handoff", m.Addr())
	}
	assert.Equal(t, len(r.latencies)*(len(c.Nodes())-1), r.bus["publish"], "each PUBLISH goes to every other node")
	t.Logf("SUMMARY cluster-wait pubsub=classic %s", r)
}

type handoffRun struct {
	handoffs  map[*redisproc.Server]int // names, thus handoffs, per primary
	slots     map[*redisproc.Server]int // distinct slots of those names
	latencies []time.Duration
	// bus counts the cluster bus messages the releases sent, by kind:
	// "publish" (PUBLISH, to every other node) and "publishshard"
	// (SPUBLISH, to the shard's replicas only).
	bus map[string]int
}

func (r handoffRun) String() string {
	slices.Sort(r.latencies)
	var sum time.Duration
	for _, d := range r.latencies {
		sum += d
	}
	return fmt.Sprintf("handoffs=%d latency_avg_ms=%.2f latency_max_ms=%.2f poll_interval_ms=%d bus_publish=%d bus_publishshard=%d",
		len(r.latencies), float64(sum)/float64(len(r.latencies))/1e6,
		float64(r.latencies[len(r.latencies)-1])/1e6, (clusterHandoff / 4).Milliseconds(),
		r.bus["publish"], r.bus["publishshard"])
}

// runClusterHandoffs holds perMaster locks on each primary with one
// client, queues a waiter on each with another, and releases them one by
// one, timing each handoff from Unlock to the waiter's Lock returning. The
// waiters' client subscribes once per slot when sharded, else once.
func runClusterHandoffs(t *testing.T, c *redisproc.Cluster, perMaster int, sharded bool) handoffRun {
	ctx := t.Context()
	holders := newClient(t, c.Client(), reentrant.WithHandoffTimeout(clusterHandoff))
	waiters := newClient(t, c.Client(), reentrant.WithHandoffTimeout(clusterHandoff))
	r := handoffRun{handoffs: map[*redisproc.Server]int{}, slots: map[*redisproc.Server]int{}}
	var names []string
	owner := map[string]*redisproc.Server{}
	for i := 0; len(names) < perMaster*len(c.Masters()); i++ {
		name := fmt.Sprintf("wait{%d}", i)
		m := c.MasterOf(hashslot.Of(lua.KeysFor(prefix, name).Lock))
		if r.handoffs[m] < perMaster {
			r.handoffs[m]++
			names = append(names, name)
			owner[name] = m
		}
	}
	for _, m := range c.Masters() {
		require.NoError(t, m.Client().ConfigResetStat(ctx).Err())
	}

	held := map[string]*reentrant.Lease{}
	for _, name := range names {
		l, err := holders.Lock(ctx, name)
		require.NoError(t, err)
		held[name] = l
	}
	type got struct {
		l  *reentrant.Lease
		at time.Time
	}
	results := map[string]chan got{}
	var wg sync.WaitGroup
	for _, name := range names {
		results[name] = make(chan got, 1)
		wg.Go(func() {
			l, err := waiters.Lock(ctx, name)
			assert.NoError(t, err, name)
			results[name] <- got{l, time.Now()}
		})
	}
	defer wg.Wait()
	// Every waiter is queued and its client subscribed before any release,
	// so that only a lost message could make a handoff wait for a poll.
	slots := map[int]bool{}
	for _, name := range names {
		slot := hashslot.Of(lua.KeysFor(prefix, name).Lock)
		if !slots[slot] {
			slots[slot] = true
			r.slots[owner[name]]++
		}
	}
	require.Eventually(t, func() bool {
		for _, name := range names {
			if st, err := waiters.Inspect(ctx, name); err != nil || st.Waiters != 1 {
				return false
			}
		}
		subs := 0
		for _, m := range c.Masters() {
			subs += commandCalls(t, m, "ssubscribe") + commandCalls(t, m, "subscribe")
		}
		return sharded && subs == len(slots) || !sharded && subs == 1
	}, 5*time.Second, 5*time.Millisecond)
	time.Sleep(50 * time.Millisecond) // the subscriptions' confirmations

	busBefore := busMessages(t, c)
	for _, name := range names {
		start := time.Now()
		require.NoError(t, held[name].Unlock(ctx))
		select {
		case g := <-results[name]:
			require.NotNil(t, g.l, name)
			assert.Equal(t, held[name].Token()+1, g.l.Token(), "%s: the next token", name)
			r.latencies = append(r.latencies, g.at.Sub(start))
			require.NoError(t, g.l.Unlock(ctx))
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no handoff within 5s", name)
		}
	}
	r.bus = busMessages(t, c)
	for k, n := range busBefore {
		r.bus[k] -= n
	}
	for i, d := range r.latencies {
		assert.Less(t, d, clusterHandoff/8, "handoff %d (%s) took %v: the message was lost and a poll took it", i, names[i], d)
	}
	return r
}

// busMessages sums, over the live primaries, the cluster bus messages
// sent for PUBLISH ("publish") and for SPUBLISH ("publishshard").
func busMessages(t *testing.T, c *redisproc.Cluster) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, m := range c.Masters() {
		rdb, ok := statClients.Load(m)
		if !ok {
			rdb, _ = statClients.LoadOrStore(m, m.Client())
		}
		info, err := rdb.(*redis.Client).ClusterInfo(t.Context()).Result()
		require.NoError(t, err)
		for _, kind := range []string{"publish", "publishshard"} {
			for _, line := range strings.Split(info, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_stats_messages_"+kind+"_sent:"); ok {
					x, _ := strconv.Atoi(v)
					n[kind] += x
				}
			}
		}
	}
	return n
}

// statClients holds one client per server for commandCalls.
var statClients sync.Map // *redisproc.Server -> *redis.Client

// commandCalls returns how often s ran cmd since its stats were reset,
// scripts' calls included, from INFO commandstats.
func commandCalls(t *testing.T, s *redisproc.Server, cmd string) int {
	t.Helper()
	rdb, ok := statClients.Load(s)
	if !ok {
		rdb, _ = statClients.LoadOrStore(s, s.Client())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	info, err := rdb.(*redis.Client).Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
			return n
		}
	}
	return 0
}

// A client that waits again on a slot within the linger reuses its shard
// subscription; past the linger, the subscription ends.
func TestClusterShardSubscriptionLingers(t *testing.T) {
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{Masters: 1})
	ctx := t.Context()
	holder := newClient(t, c.Client())
	waiter := newClient(t, c.Client())
	// Long enough that the second wait surely starts within it on a
	// loaded machine (the gap between the waits is a Lock and a goroutine
	// start), short enough to watch it pass.
	reentrant.SetShardLinger(waiter, 2*time.Second)
	m := c.Masters()[0]
	require.NoError(t, m.Client().ConfigResetStat(ctx).Err())
	name := fmt.Sprintf("linger{%d}", time.Now().UnixNano())
	channels := func() int {
		v, err := m.Client().Do(ctx, "PUBSUB", "SHARDCHANNELS", prefix+":c:*").StringSlice()
		require.NoError(t, err)
		return len(v)
	}
	handoff := func() {
		l, err := holder.Lock(ctx, name)
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			w, err := waiter.Lock(ctx, name)
			if err == nil {
				err = w.Unlock(ctx)
			}
			got <- err
		}()
		require.Eventually(t, func() bool { return channels() == 1 }, 5*time.Second, 5*time.Millisecond)
		require.NoError(t, l.Unlock(ctx))
		require.NoError(t, <-got)
	}
	handoff()
	handoff()
	require.Equal(t, 1, commandCalls(t, m, "ssubscribe"), "the second wait reuses the subscription")
	require.Eventually(t, func() bool { return channels() == 0 }, time.Minute, 20*time.Millisecond,
		"the subscription ends past the linger")
}
