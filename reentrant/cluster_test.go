//go:build unix

package reentrant_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/hashslot"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// clusterHandoff is the handoff timeout of the clients here. Their
// waiters poll once a minute (a retry strategy, and a two-minute TTL whose
// queue they keep alive every minute too), so a waiter handed a lock
// within the handoffs' ceiling was woken by its message, however slow the
// machine: a lost message would leave it waiting for a poll a minute away.
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
	// The bus sends on its own time: wait for the count, then check it.
	want := len(r.latencies) * (len(c.Nodes()) - 1)
	assert.Eventually(t, func() bool { return r.busSince(t, c)["publish"] >= want }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, want, r.busSince(t, c)["publish"], "each PUBLISH goes to every other node")
	t.Logf("SUMMARY cluster-wait pubsub=classic %s", r)
}

// On primaries without Functions (before Redis 7, played here by servers
// whose FUNCTION, FCALL and FCALL_RO are renamed away), every script goes
// as EVALSHA (EVAL after a NOSCRIPT), and the handoffs on every primary
// are as with Functions: one SPUBLISH each, each waiter woken by it.
func TestClusterWithoutFunctions(t *testing.T) {
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{Args: redisproc.NoFunctionsArgs})
	r := runClusterHandoffs(t, c, 2, true)
	for _, m := range c.Masters() {
		scripts := commandCalls(t, m, "evalsha") + commandCalls(t, m, "eval")
		// Per name: the holder's Lock, the waiter's, and their two Unlocks.
		assert.GreaterOrEqual(t, scripts, 4*r.handoffs[m], "%s: the calls ran as scripts", m.Addr())
		assert.Equal(t, r.handoffs[m], commandCalls(t, m, "spublish"), "%s: one SPUBLISH per handoff", m.Addr())
	}
	t.Logf("SUMMARY cluster-wait functions=no %s", r)
}

// scriptPath is how a cluster's primaries run the scripts: as Functions
// (FCALL), or, started with args that rename FUNCTION, FCALL and FCALL_RO
// away, as EVALSHA.
type scriptPath struct {
	functions bool
	args      []string // extra redis-server arguments for every node
}

// eachScriptPath runs f as two subtests: "functions", on servers with
// Functions, and "evalsha", on servers without them.
func eachScriptPath(t *testing.T, f func(t *testing.T, p scriptPath)) {
	t.Run("functions", func(t *testing.T) { f(t, scriptPath{functions: true}) })
	t.Run("evalsha", func(t *testing.T) { f(t, scriptPath{args: redisproc.NoFunctionsArgs}) })
}

type handoffRun struct {
	handoffs  map[*redisproc.Server]int // names, thus handoffs, per primary
	slots     map[*redisproc.Server]int // distinct slots of those names
	latencies []time.Duration
	// bus counts the cluster bus messages the releases sent, by kind:
	// "publish" (PUBLISH, to every other node) and "publishshard"
	// (SPUBLISH, to the shard's replicas only).
	bus     map[string]int
	busBase map[string]int // the counts before the releases
}

// busSince counts the cluster bus messages sent since the releases began,
// by kind, now: the bus carries them after the releases return.
func (r handoffRun) busSince(t *testing.T, c *redisproc.Cluster) map[string]int {
	n := busMessages(t, c)
	for k, v := range r.busBase {
		n[k] -= v
	}
	return n
}

func (r handoffRun) String() string {
	slices.Sort(r.latencies)
	var sum time.Duration
	for _, d := range r.latencies {
		sum += d
	}
	return fmt.Sprintf("handoffs=%d latency_avg_ms=%.2f latency_max_ms=%.2f bus_publish=%d bus_publishshard=%d",
		len(r.latencies), float64(sum)/float64(len(r.latencies))/1e6,
		float64(r.latencies[len(r.latencies)-1])/1e6, r.bus["publish"], r.bus["publishshard"])
}

// runClusterHandoffs holds perMaster locks on each primary with one
// client, queues a waiter on each with another, and releases them one by
// one, timing each handoff from Unlock to the waiter's Lock returning. The
// waiters' client subscribes once per slot when sharded, else once.
func runClusterHandoffs(t *testing.T, c *redisproc.Cluster, perMaster int, sharded bool) handoffRun {
	ctx := t.Context()
	holders := newClient(t, c.Client(), reentrant.WithHandoffTimeout(clusterHandoff))
	waiters := newClient(t, c.Client(), reentrant.WithHandoffTimeout(clusterHandoff),
		reentrant.WithTTL(2*time.Minute), reentrant.WithRetry(reentrant.LinearBackoff(time.Minute)))
	r := handoffRun{handoffs: map[*redisproc.Server]int{}, slots: map[*redisproc.Server]int{}}
	var names []string
	owner := map[string]*redisproc.Server{}
	for i := 0; len(names) < perMaster*len(c.Masters()); i++ {
		name := fmt.Sprintf("wait{%d}", i)
		m := c.MasterOf(hashslot.Of(scripts.KeysFor(prefix, name).Lock))
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
		slot := hashslot.Of(scripts.KeysFor(prefix, name).Lock)
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
	}, time.Minute, 5*time.Millisecond)
	time.Sleep(50 * time.Millisecond) // the subscriptions' confirmations

	busBefore := busMessages(t, c)
	for _, name := range names {
		start := time.Now()
		require.NoError(t, held[name].Unlock(ctx))
		select {
		case g := <-results[name]:
			require.NotNil(t, g.l, name)
			assert.Greater(t, g.l.Token(), held[name].Token(), "%s: the next token", name)
			r.latencies = append(r.latencies, g.at.Sub(start))
			require.NoError(t, g.l.Unlock(ctx))
		case <-time.After(30 * time.Second): // far below the waiters' next poll
			t.Fatalf("%s: no handoff within 30 s: the message was lost", name)
		}
	}
	r.busBase = busBefore
	r.bus = r.busSince(t, c)
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

// statClients holds one client per server for busMessages.
var statClients sync.Map // *redisproc.Server -> *redis.Client

// commandCalls returns how often s ran cmd since its stats were reset,
// scripts' calls included, from INFO commandstats.
func commandCalls(t *testing.T, s *redisproc.Server, cmd string) int {
	t.Helper()
	// cmdstat_<cmd>:calls=<n>,usec=...
	calls, _, _ := strings.Cut(s.Info("commandstats")["cmdstat_"+cmd], ",")
	n, _ := strconv.Atoi(strings.TrimPrefix(calls, "calls="))
	return n
}

// A client that waits again on a slot within the linger reuses its shard
// subscription; past the linger, the subscription ends.
func TestClusterShardSubscriptionLingers(t *testing.T) {
	t.Parallel() // see TestMain
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

// clusterNames returns n distinct names, the awkward ones for hash tags
// first: braces, '%', empty tags, unicode, bytes Redis does not care about.
func clusterNames(n int) []string {
	names := []string{"a{b}", "%7B", "{}", "x}y{", "{", "}", "%", "%%7D", "{a}{b}", "}{", "a b",
		"ключ", "名前", "🔒", "\x00", "\n", strings.Repeat("{}%", reentrant.MaxNameLen/3)}
	for i := len(names); i < n; i++ {
		switch i % 6 {
		case 0:
			names = append(names, fmt.Sprintf("{%d}", i))
		case 1:
			names = append(names, fmt.Sprintf("%%%d%%7D", i))
		case 2:
			names = append(names, fmt.Sprintf("%d}{", i))
		case 3:
			names = append(names, fmt.Sprintf("ü-%d", i))
		default:
			names = append(names, fmt.Sprintf("name-%d", i))
		}
	}
	return names
}

// A thousand names spread over every primary of a real cluster, each
// locked, inspected, reentered and unlocked through a ClusterClient.
func TestClusterThousandNames(t *testing.T) {
	t.Parallel() // see TestMain
	eachScriptPath(t, testClusterThousandNames)
}

// testClusterThousandNames is its test, on primaries that run the scripts as p says.
func testClusterThousandNames(t *testing.T, p scriptPath) {
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{Args: p.args})
	cc := c.Client()
	lc := newClient(t, cc)
	ctx := t.Context()
	names := clusterNames(1000)
	owner := map[int]*redisproc.Server{}
	perMaster := map[*redisproc.Server]int{}
	for _, name := range names {
		slot := hashslot.Of(scripts.KeysFor(prefix, name).Lock)
		if owner[slot] == nil {
			owner[slot] = c.MasterOf(slot)
		}
		perMaster[owner[slot]]++
	}

	start := time.Now()
	work := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for name := range work {
				l, err := lc.Lock(ctx, name)
				if !assertNoErr(t, err) {
					continue
				}
				st, err := lc.Inspect(ctx, name)
				assertNoErr(t, err)
				assert.True(t, st.Held && st.Token == l.Token() && st.Depth == 1 && st.Owner == string(l.Owner()), "%q: %+v", name, st)
				inner, err := lc.Lock(l.Context(), name)
				if assertNoErr(t, err) {
					assert.Equal(t, l.Token(), inner.Token(), "%q: reentry keeps the token", name)
					assert.EqualValues(t, 2, inner.Depth())
					assertNoErr(t, inner.Unlock(ctx))
				}
				assertNoErr(t, l.Unlock(ctx))
				st, err = lc.Inspect(ctx, name)
				assertNoErr(t, err)
				// LastToken is the floor of the name's slot, which other
				// names of the slot may have raised since.
				assert.True(t, !st.Held && st.LastToken >= l.Token(), "%q after unlock: %+v", name, st)
			}
		})
	}
	for _, name := range names {
		work <- name
	}
	close(work)
	wg.Wait()
	took := time.Since(start)

	var counts []string
	for i, m := range c.Masters() {
		keys, err := m.Client().Keys(ctx, "*").Result()
		require.NoError(t, err)
		floors := 0
		for _, k := range keys {
			if !strings.HasSuffix(k, ":f") {
				assert.Fail(t, "unexpected key", "primary %d: %s: a released name keeps no key of its own, nor a queue", i, k)
				continue
			}
			floors++
			assert.Equal(t, m, owner[hashslot.Of(k)], "primary %d: floor %s is in the slot of a name locked there", i, k)
			assert.Positive(t, m.Client().PTTL(ctx, k).Val(), "primary %d: floor %s expires", i, k)
		}
		slots := 0
		for _, o := range owner {
			if o == m {
				slots++
			}
		}
		assert.Positive(t, perMaster[m], "primary %d got no name", i)
		assert.Equal(t, slots, floors, "primary %d keeps one floor per slot of its names, nothing else", i)
		counts = append(counts, fmt.Sprint(perMaster[m]))
		if p.functions {
			assert.Equal(t, []string{scripts.LibraryName()}, testenv.Libraries(t, m.Client()), "primary %d has the library", i)
		} else {
			assert.Positive(t, cachedScripts(t, m), "primary %d has the scripts", i)
		}
	}
	t.Logf("SUMMARY cluster-names names=%d masters=%d per_master=%s calls=%d took_ms=%d",
		len(names), len(perMaster), strings.Join(counts, "/"), 6*len(names), took.Milliseconds())

	// A primary that lost the library (FUNCTION FLUSH; or a node that
	// joined after the load) gets it again from the first call there;
	// without Functions, one that lost its scripts (SCRIPT FLUSH) gets
	// them from the first call answered NOSCRIPT.
	m := c.Masters()[0]
	if p.functions {
		require.NoError(t, m.Client().FunctionFlush(ctx).Err())
	} else {
		require.NoError(t, m.Client().ScriptFlush(ctx).Err())
		require.Zero(t, cachedScripts(t, m))
	}
	for _, name := range names {
		if owner[hashslot.Of(scripts.KeysFor(prefix, name).Lock)] == m {
			l, err := lc.Lock(ctx, name)
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))
			break
		}
	}
	if p.functions {
		require.Equal(t, []string{scripts.LibraryName()}, testenv.Libraries(t, m.Client()), "reloaded on the primary that lost it")
	} else {
		require.Positive(t, cachedScripts(t, m), "the scripts cached again on the primary that lost them")
	}
}

// cachedScripts is the number of scripts s holds in its script cache
// (INFO memory's number_of_cached_scripts).
func cachedScripts(t *testing.T, s *redisproc.Server) int {
	t.Helper()
	n, err := strconv.Atoi(s.Info("memory")["number_of_cached_scripts"])
	require.NoError(t, err, "%s: number_of_cached_scripts", s.Addr())
	return n
}

// A lock nobody waits for has no queue key, so from SETSLOT MIGRATING to
// SETSLOT NODE the cluster answers its acquire and release TRYAGAIN (one of
// the two keys they name is missing). A slow move outlasts go-redis's own
// retries, which then return TRYAGAIN; redfence retries on, so every call
// succeeds and keeps its promises: tokens go on by one, a reentry keeps its
// token, a lock held across the move is renewed and stays held.
func TestClusterSlowMoveUncontended(t *testing.T) {
	t.Parallel() // see TestMain
	eachScriptPath(t, testClusterSlowMoveUncontended)
}

// testClusterSlowMoveUncontended is its test, on primaries that run the scripts as p says.
func testClusterSlowMoveUncontended(t *testing.T, p scriptPath) {
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{Args: p.args})
	cc := c.Client()
	var surfaced atomic.Int64 // TRYAGAIN that go-redis gave up on
	cc.AddHook(testenv.Hook{Done: func(_ []redis.Cmder, pipe bool, err error) {
		if !pipe && err != nil && strings.HasPrefix(err.Error(), "TRYAGAIN") {
			surfaced.Add(1)
		}
	}})
	// Leases renewed every 100 ms with 2.6 s to spare: the lock held
	// across the move is renewed through it, and no lease is lost to a
	// renewal a loaded machine sent late (a 1 s TTL left 570 ms).
	lc := newClient(t, cc, reentrant.WithTTL(3*time.Second), reentrant.WithRenewInterval(100*time.Millisecond))
	ctx := t.Context()
	name := fmt.Sprintf("move{%d}", time.Now().UnixNano())
	pair, slot := testenv.SameSlot(prefix, name, 2)
	other := pair[1]
	held, err := lc.Lock(ctx, other)
	require.NoError(t, err)

	var (
		stop   atomic.Bool
		rounds int
		tokens []uint64
		errs   []error
		wg     sync.WaitGroup
	)
	wg.Go(func() {
		for !stop.Load() {
			l, err := lc.Lock(ctx, name)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			tokens = append(tokens, uint64(l.Token()))
			inner, err := lc.TryLock(l.Context(), name)
			if err == nil && inner.Token() != l.Token() {
				err = fmt.Errorf("reentry got token %d, not %d", inner.Token(), l.Token())
			}
			if err == nil {
				_, err = lc.Inspect(ctx, name)
			}
			for _, e := range []error{err, unlockIf(ctx, inner), l.Unlock(ctx)} {
				if e != nil {
					errs = append(errs, e)
				}
			}
			rounds++
		}
	})
	time.Sleep(100 * time.Millisecond)
	from := c.MasterOf(slot)
	to := c.Masters()[0]
	if to == from {
		to = c.Masters()[1]
	}
	st := c.MigrateSlot(slot, to, 1, 300*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	stop.Store(true)
	wg.Wait()

	require.Empty(t, errs, "no caller may see the move")
	for i := 1; i < len(tokens); i++ {
		require.Greater(t, tokens[i], tokens[i-1], "tokens increase")
	}
	assert.NoError(t, held.Err(), "the lock held across the move stays held")
	assert.NoError(t, held.Extend(ctx, time.Second))
	assert.NoError(t, held.Unlock(ctx))
	assert.Positive(t, surfaced.Load(), "go-redis gave up on TRYAGAIN at least once: the move outlasted its retries")
	t.Logf("SUMMARY cluster-slow-move keys=%d batches=%d migrate_ms=%d rounds=%d tryagain_after_go_redis=%d caller_errors=%d",
		st.Keys, st.Batches, st.Took.Milliseconds(), rounds, surfaced.Load(), len(errs))
}

func unlockIf(ctx context.Context, l *reentrant.Lease) error {
	if l == nil {
		return nil
	}
	return l.Unlock(ctx)
}

// A release that runs on a slot's new primary before the slot is handed
// over (the keys have moved, SETSLOT NODE has not come) publishes there,
// while the waiter's subscription is still on the old primary: the message
// reaches nobody. The waiter's poll gets the lock all the same.
func TestClusterHandoffDuringMoveIsPolled(t *testing.T) {
	t.Parallel() // see TestMain
	eachScriptPath(t, testClusterHandoffDuringMoveIsPolled)
}

// testClusterHandoffDuringMoveIsPolled is its test, on primaries that run the scripts as p says.
func testClusterHandoffDuringMoveIsPolled(t *testing.T, p scriptPath) {
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{Args: p.args})
	ctx := t.Context()
	holder := newClient(t, c.Client())
	waiter := newClient(t, c.Client())
	name := fmt.Sprintf("polled{%d}", time.Now().UnixNano())
	slot := hashslot.Of(scripts.KeysFor(prefix, name).Lock)
	from := c.MasterOf(slot)
	to := c.Masters()[0]
	if to == from {
		to = c.Masters()[1]
	}
	held, err := holder.Lock(ctx, name)
	require.NoError(t, err)
	type got struct {
		l   *reentrant.Lease
		err error
		at  time.Time
	}
	waited := make(chan got, 1)
	go func() {
		l, err := waiter.Lock(ctx, name)
		waited <- got{l, err, time.Now()}
	}()
	shardChannels := func(s *redisproc.Server) []string {
		v, err := s.Client().Do(ctx, "PUBSUB", "SHARDCHANNELS", prefix+":c:*").StringSlice()
		require.NoError(t, err)
		return v
	}
	require.Eventually(t, func() bool { return len(shardChannels(from)) == 1 }, 5*time.Second, 5*time.Millisecond,
		"the waiter subscribes on the slot's primary")

	type released struct {
		at            time.Time
		subsFrom, sub int
		err           error
	}
	rel := make(chan released, 1)
	go func() {
		// Once every key is on the new primary, release: it runs there.
		for from.Client().ClusterCountKeysInSlot(ctx, int(slot)).Val() != 0 {
			time.Sleep(time.Millisecond)
		}
		r := released{subsFrom: len(shardChannels(from)), sub: len(shardChannels(to)), at: time.Now()}
		r.err = held.Unlock(ctx)
		rel <- r
	}()
	c.MigrateSlot(slot, to, 100, 600*time.Millisecond)
	r := <-rel
	require.NoError(t, r.err)
	require.Equal(t, 1, r.subsFrom, "the waiter's subscription was still on the old primary")
	require.Zero(t, r.sub, "nobody listened on the new primary")
	g := <-waited
	require.NoError(t, g.err)
	// The release handed the lock over with the next token, but the claim
	// may come too late: with the queue emptied, the claim names a missing
	// key and gets TRYAGAIN until SETSLOT NODE. The handed lock then
	// expires after the claim time and the waiter's poll takes it afresh.
	require.Greater(t, g.l.Token(), held.Token())
	took := g.at.Sub(r.at)
	// A poll (every 250 ms by default, plus jitter) takes it once the
	// handed lock's claim time (500 ms) and the SETSLOT pause (600 ms) are
	// over; without the poll the waiter would wait for its context (here,
	// the test's) or, polling at the longest delay, 5 s.
	testenv.Within(t, took, 600*time.Millisecond+reentrant.DefaultHandoffTimeout/2+reentrant.DefaultHandoffTimeout/4+reentrant.DefaultRetryJitter,
		"the waiter's poll after a lost handoff message")
	require.NoError(t, g.l.Unlock(ctx))
	t.Logf("SUMMARY cluster-move-lost-message handoff_ms=%.1f tokens_skipped=%d poll_interval_ms=250 claim_ms=500 setslot_pause_ms=600",
		float64(took)/1e6, g.l.Token()-held.Token()-1)
}

// clusterReply is an error reply of a Cluster in transition, as go-redis
// returns it: a redis.Error.
type clusterReply string

func (e clusterReply) Error() string { return string(e) }
func (clusterReply) RedisError()     {}

// busyHook answers the next n script calls (EVALSHA and EVAL, alone or in
// a pipeline) with err instead of sending them, as a Cluster moving a slot
// or electing a primary does: nothing runs.
type busyHook struct {
	err     error
	n, seen atomic.Int64
}

func (h *busyHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *busyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.refuse(cmd) {
			return h.err
		}
		return next(ctx, cmd)
	}
}

func (h *busyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var pass []redis.Cmder
		for _, cmd := range cmds {
			if !h.refuse(cmd) {
				pass = append(pass, cmd)
			}
		}
		if len(pass) == 0 {
			return h.err
		}
		return next(ctx, pass)
	}
}

func (h *busyHook) refuse(cmd redis.Cmder) bool {
	if !testenv.ScriptCall(cmd.Name()) {
		return false
	}
	if h.n.Add(-1) < 0 {
		h.n.Add(1)
		return false
	}
	h.seen.Add(1)
	cmd.SetErr(h.err)
	return true
}

// Each Cluster reply that proves nothing ran is retried within the
// caller's context: the caller sees the call succeed, with the promises
// of a call that was never refused.
func TestBusyClusterRepliesAreRetried(t *testing.T) {
	for _, reply := range []string{
		"TRYAGAIN Multiple keys request during rehashing of slot",
		"ASK 3300 127.0.0.1:7001", "MOVED 3300 127.0.0.1:7001",
		"CLUSTERDOWN The cluster is down",
	} {
		t.Run(strings.Fields(reply)[0], func(t *testing.T) {
			_, rdb := testenv.Mini(t)
			h := &busyHook{err: clusterReply(reply)}
			rdb.AddHook(h)
			c := newClient(t, rdb, reentrant.WithTTL(time.Minute))
			ctx, name := t.Context(), testenv.Unique(t)

			h.n.Store(3)
			l, err := c.Lock(ctx, name)
			require.NoError(t, err, "Lock")
			require.Positive(t, l.Token())
			h.n.Store(3)
			inner, err := c.TryLock(l.Context(), name)
			require.NoError(t, err, "TryLock (reentry)")
			require.EqualValues(t, 2, inner.Depth())
			h.n.Store(3)
			st, err := c.Inspect(ctx, name)
			require.NoError(t, err, "Inspect")
			require.EqualValues(t, 2, st.Depth)
			h.n.Store(3)
			require.NoError(t, l.Extend(ctx, time.Minute), "Extend")
			h.n.Store(3)
			_, err = l.TTL(ctx)
			require.NoError(t, err, "TTL")
			h.n.Store(3)
			require.NoError(t, inner.Unlock(ctx), "Unlock (inner)")
			h.n.Store(3)
			require.NoError(t, l.Unlock(ctx), "Unlock")
			require.EqualValues(t, 21, h.seen.Load(), "every refusal was seen and retried")

			st, err = c.Inspect(ctx, name)
			require.NoError(t, err)
			require.False(t, st.Held, "released once per level, not more, not less")
			require.Equal(t, reentrant.State{Name: name, LastToken: l.Token()}, st)
		})
	}
}

// While the Cluster stays busy past the caller's context, the call fails
// with the context's error and the last reply, which errors.As finds; an
// acquire's undo runs in the background and leaves nothing behind.
func TestBusyClusterPastTheContext(t *testing.T) {
	_, rdb := testenv.Mini(t)
	h := &busyHook{err: clusterReply("TRYAGAIN Multiple keys request during rehashing of slot")}
	rdb.AddHook(h)
	c := newClient(t, rdb, reentrant.WithTTL(time.Minute))
	name := testenv.Unique(t)

	h.n.Store(1 << 30)
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.TryLock(ctx, name)
	require.ErrorIs(t, err, reentrant.ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var reply redis.Error
	require.True(t, errors.As(err, &reply), "errors.As finds the reply: %v", err)
	testenv.Within(t, time.Since(start), 150*time.Millisecond+reentrant.CleanupBudget, "TryLock on a busy Cluster")
	require.Greater(t, h.seen.Load(), int64(5), "retried with backoff meanwhile")

	h.n.Store(0)
	st, err := c.Inspect(t.Context(), name)
	require.NoError(t, err)
	require.False(t, st.Held)
}

// Renewals a Cluster refuses for now are sent again within the renewal's
// window, so the lease survives.
func TestBusyClusterRenewalIsRetried(t *testing.T) {
	_, rdb := testenv.Mini(t)
	h := &busyHook{err: clusterReply("CLUSTERDOWN The cluster is down")}
	rdb.AddHook(h)
	c := newClient(t, rdb, reentrant.WithTTL(time.Minute))
	l, err := c.Lock(t.Context(), testenv.Unique(t))
	require.NoError(t, err)
	h.n.Store(4)
	require.Equal(t, 1, reentrant.RenewAllNow(c))
	require.EqualValues(t, 4, h.seen.Load())
	require.NoError(t, l.Err(), "the renewal went through on the fifth attempt")
	require.NoError(t, l.Unlock(t.Context()))
}

// lockRounds runs Lock and Unlock on each name, one goroutine per name,
// until stop is set, counting the rounds done in rounds, and returns the
// tokens each name got and every error.
func lockRounds(ctx context.Context, lc *reentrant.Client, names []string, stop *atomic.Bool, rounds *atomic.Int64) (map[string][]uint64, []error) {
	var mu sync.Mutex
	tokens := map[string][]uint64{}
	var errs []error
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() {
			for !stop.Load() {
				l, err := lc.Lock(ctx, name)
				if err == nil {
					mu.Lock()
					tokens[name] = append(tokens[name], uint64(l.Token()))
					mu.Unlock()
					err = l.Unlock(ctx)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", name, err))
					mu.Unlock()
				}
				rounds.Add(1)
			}
		})
	}
	wg.Wait()
	return tokens, errs
}

// Eight callers on names of one slot while the slot migrates (MIGRATING,
// the keys moved two at a time, then SETSLOT NODE): no caller sees the
// move, each name's tokens go on by one, and the new primary has the
// library. A Cluster client sends each acquire and release alone, never in
// a pipeline (design.md, "Concurrent calls share round trips", says why).
func TestClusterMoveUnderConcurrentCalls(t *testing.T) {
	t.Parallel() // see TestMain
	eachScriptPath(t, testClusterMoveUnderConcurrentCalls)
}

// testClusterMoveUnderConcurrentCalls is its test, on primaries that run the scripts as p says.
func testClusterMoveUnderConcurrentCalls(t *testing.T, p scriptPath) {
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{Args: p.args})
	cc := c.Client()
	var pipelined atomic.Int64
	cc.AddHook(testenv.Hook{Done: func(cmds []redis.Cmder, pipe bool, err error) {
		for _, cmd := range cmds {
			if pipe && (scripts.Ran("acquire", cmd, err) || scripts.Ran("release", cmd, err)) {
				pipelined.Add(1)
			}
		}
	}})
	// Renewed every 100 ms with 2.6 s to spare (see the slow move's test).
	lc := newClient(t, cc, reentrant.WithTTL(3*time.Second), reentrant.WithRenewInterval(100*time.Millisecond))
	names, slot := testenv.SameSlot(prefix, fmt.Sprintf("cmove{%d}", time.Now().UnixNano()), 8)
	var stop atomic.Bool
	var rounds atomic.Int64
	type outcome struct {
		tokens map[string][]uint64
		errs   []error
	}
	done := make(chan outcome, 1)
	go func() {
		tokens, errs := lockRounds(t.Context(), lc, names, &stop, &rounds)
		done <- outcome{tokens, errs}
	}()
	require.Eventually(t, func() bool { return rounds.Load() >= 16 }, time.Minute, time.Millisecond, "rounds before the move")
	from := c.MasterOf(slot)
	to := c.Masters()[0]
	if to == from {
		to = c.Masters()[1]
	}
	st := c.MigrateSlot(slot, to, 2, 100*time.Millisecond)
	after := rounds.Load()
	require.Eventually(t, func() bool { return rounds.Load() >= after+16 }, time.Minute, time.Millisecond, "rounds after the move")
	stop.Store(true)
	out := <-done
	require.Empty(t, out.errs, "no caller may see the move")
	for _, name := range names {
		toks := out.tokens[name]
		require.NotEmpty(t, toks, name)
		for i := 1; i < len(toks); i++ {
			require.Greater(t, toks[i], toks[i-1], "%s: tokens increase", name)
		}
	}
	require.Zero(t, pipelined.Load(), "acquire or release calls sent in a pipeline")
	if p.functions {
		require.Equal(t, []string{scripts.LibraryName()}, testenv.Libraries(t, to.Client()), "the new primary has the library")
	} else {
		require.Positive(t, cachedScripts(t, to), "the new primary has the scripts")
	}
	t.Logf("SUMMARY cluster-concurrent-move keys=%d batches=%d migrate_ms=%d rounds=%d by_move_end=%d",
		st.Keys, st.Batches, st.Took.Milliseconds(), rounds.Load(), after)
}
