//go:build unix

package jepsen_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/internal/tuning"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
)

// clusterHolderOptions are the go-redis options of the holders' cluster
// clients: the short timeouts of faultRedisOptions, go-redis's own
// redirects (MaxRedirects 3) and retry backoff.
func clusterHolderOptions(o *redis.ClusterOptions) {
	o.DialTimeout = 250 * time.Millisecond
	o.ReadTimeout = 250 * time.Millisecond
	o.WriteTimeout = 250 * time.Millisecond
	o.PoolTimeout = 500 * time.Millisecond
	o.ContextTimeoutEnabled = true
}

// clusterReplies counts the replies of a Cluster in transition (TRYAGAIN,
// ASK, MOVED, CLUSTERDOWN) and failed dials, as each node's connection got
// them (node; go-redis follows or retries most by itself) and as go-redis
// returned them to redfence, which retries them (client).
type clusterReplies struct {
	mu           sync.Mutex
	node, client map[string]int
}

func (r *clusterReplies) count(where map[string]int, err error) {
	if err == nil {
		return
	}
	k := clusterErrKind(err.Error())
	switch k {
	case "TRYAGAIN", "CLUSTERDOWN", "MOVED", "ASK", "connection_refused":
		r.mu.Lock()
		where[k]++
		r.mu.Unlock()
	}
}

// watch counts the replies c's nodes and c itself give.
func (r *clusterReplies) watch(c *redis.ClusterClient) {
	r.mu.Lock()
	if r.node == nil {
		r.node, r.client = map[string]int{}, map[string]int{}
	}
	r.mu.Unlock()
	c.AddHook(r.hook(r.client))
	c.OnNewNode(func(n *redis.Client) { n.AddHook(r.hook(r.node)) })
}

// hook counts, in where, the replies of each command a client sends.
func (r *clusterReplies) hook(where map[string]int) testenv.Hook {
	return testenv.Hook{Done: func(cmds []redis.Cmder, pipe bool, err error) {
		for _, cmd := range cmds {
			if pipe {
				err = cmd.Err()
			}
			r.count(where, err)
		}
	}}
}

func (r *clusterReplies) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := func(m map[string]int) string {
		var kinds []string
		for k, n := range m {
			kinds = append(kinds, fmt.Sprintf("%s:%d", k, n))
		}
		sort.Strings(kinds)
		return strings.Join(kinds, ",")
	}
	return "replies_node=" + f(r.node) + " replies_to_redfence=" + f(r.client)
}

// clusterSlotNames returns n lock names, unique to the test, whose keys
// (under the default prefix) all share one slot, and that slot.
func clusterSlotNames(t *testing.T, n int) ([]string, int) {
	return testenv.SameSlot(scripts.DefaultPrefix, testenv.Unique(t), n)
}

// clusterNameOn returns a lock name, unique to the test, whose slot is
// served by primary m.
func clusterNameOn(t *testing.T, c *redisproc.Cluster, m *redisproc.Server) string {
	return testenv.NameWhere(scripts.DefaultPrefix, testenv.Unique(t), func(slot int) bool { return c.MasterOf(slot) == m })
}

// clusterWorkers runs holders (faultHolder, as goroutines) on several
// names of one cluster: perName holders per name, each with a cluster
// client and a lock client of its own, writing the key named like the lock
// to one shared store. Each name has its own history.
type clusterWorkers struct {
	names   []string
	replies clusterReplies
	hists   map[string]*faultHistory
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func clusterStartWorkers(t *testing.T, c *redisproc.Cluster, names []string, perName int, cfg faultWorkersConfig, store storage.Store) *clusterWorkers {
	t.Helper()
	w := &clusterWorkers{names: names, hists: map[string]*faultHistory{}}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	proc := 0
	for _, name := range names {
		h := &faultHistory{}
		w.hists[name] = h
		for range perName {
			cc := c.Client(clusterHolderOptions)
			w.replies.watch(cc)
			lc, err := reentrant.New(cc, cfg.lockOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			faultRunHolder(t, ctx, &w.wg, cfg.holder(proc, lc, store, name, []string{name}, h.add))
			proc++
		}
	}
	t.Cleanup(func() { w.stop(t) })
	return w
}

// awaitGrant waits, at most a minute, until some holder of some name was
// granted its lock after at (a faultNow reading), failing t past that (see
// faultWorkers.awaitGrant).
func (w *clusterWorkers) awaitGrant(t *testing.T, at int64) {
	t.Helper()
	granted := func() bool {
		for _, h := range w.hists {
			if faultGrantedAfter(h.snapshot(), at) {
				return true
			}
		}
		return false
	}
	for end := time.Now().Add(time.Minute); !granted(); {
		if time.Now().After(end) {
			t.Fatalf("no holder was granted a lock within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the holders after their current section and returns each
// name's history.
func (w *clusterWorkers) stop(t *testing.T) map[string][]faultOp {
	t.Helper()
	faultStopHolders(t, w.cancel, &w.wg)
	ops := map[string][]faultOp{}
	for name, h := range w.hists {
		ops[name] = h.snapshot()
	}
	return ops
}

// clusterTally counts, over every name, what the oracle reports and what
// callers saw: lock calls that failed (not acquired within their wait),
// leases lost (an unlock that found the lock gone, or a lease that
// reported itself lost), and errors by kind.
type clusterTally struct {
	faultReport
	lockFailed, leasesLost int
	errs                   map[string]int
}

func (c *clusterTally) add(r faultReport, ops []faultOp) {
	c.faultReport = faultMerge(c.Scenario, []faultReport{c.faultReport, r})
	if c.errs == nil {
		c.errs = map[string]int{}
	}
	for _, op := range ops {
		switch {
		case op.Kind == faultLock && op.Outcome == faultFailed:
			c.lockFailed++
		case op.Kind == faultUnlock && (op.Outcome == faultNotHeld || op.LostAt > 0):
			c.leasesLost++
		}
		if op.Err != "" {
			c.errs[clusterErrKind(op.Err)]++
		}
	}
}

// clusterErrKind names the kind of a caller's error.
func clusterErrKind(e string) string {
	for _, k := range []string{"TRYAGAIN", "CLUSTERDOWN", "MOVED", "ASK ", "connection refused", "i/o timeout",
		"context deadline exceeded", "not held", "not acquired"} {
		if strings.Contains(e, k) {
			return strings.ReplaceAll(strings.TrimSpace(k), " ", "_")
		}
	}
	return "other"
}

// busyErrors counts errors of the kinds retried inside the client, which
// no caller should see.
func (c *clusterTally) busyErrors() int {
	return c.errs["TRYAGAIN"] + c.errs["MOVED"] + c.errs["ASK"]
}

func (c *clusterTally) String() string {
	kinds := make([]string, 0, len(c.errs))
	for k, n := range c.errs {
		kinds = append(kinds, fmt.Sprintf("%s:%d", k, n))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("acquisitions=%d lock_failed=%d accepted=%d refused=%d mutex_violations=%d stale_accepted=%d unknown=%d tokens_repeated=%d fenced_out=%d leases_lost=%d writes_after_loss=%d errors=%s",
		c.Acquisitions, c.lockFailed, c.Accepted, c.Refused, c.MutexViolations, c.StaleAccepted, c.Unknown,
		c.TokensRepeated, c.FencedOut, c.leasesLost, c.AfterLoss, strings.Join(kinds, ","))
}

// clusterWaited is how the waiter of clusterHoldAndWait ended, stamped
// with faultNow.
type clusterWaited struct {
	l   *reentrant.Lease
	err error
	at  int64
}

// clusterHoldAndWait takes name with one client and has a second, built
// with waitOpts, wait for it: the scenarios follow a held lock and its
// waiter across an event. The held lease renews every 100 ms with a 30 s
// TTL: it is renewed across an event that loses nothing however long a
// loaded machine makes it (a graceful failover took 2.9 s beside another
// scenario, past a 600 ms or a 3 s lease). The clients close when the test
// ends.
func clusterHoldAndWait(t *testing.T, ctx context.Context, c *redisproc.Cluster, name string, waitOpts ...reentrant.ClientOption) (*reentrant.Lease, <-chan clusterWaited) {
	t.Helper()
	holdC, err := reentrant.New(c.Client(clusterHolderOptions), reentrant.WithTTL(30*time.Second),
		tuning.RenewInterval(100*time.Millisecond).(reentrant.CallOption))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holdC.Close() })
	waitC, err := reentrant.New(c.Client(clusterHolderOptions), waitOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waitC.Close() })
	held, err := holdC.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan clusterWaited, 1)
	go func() {
		l, err := waitC.Lock(ctx, name)
		waited <- clusterWaited{l, err, faultNow()}
	}()
	return held, waited
}
