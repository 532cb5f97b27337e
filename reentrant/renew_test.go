//go:build unix

package reentrant_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sync/errgroup"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// traffic is a go-redis hook that counts round trips: pipelines, the
// commands they carried (EVALs among them), and scripts sent on their own.
// It can also hold the next pipeline until released, ignoring its context
// as a client without ContextTimeoutEnabled does on a frozen server.
type traffic struct {
	pipes, pipeCmds, evals atomic.Int64
	singles                atomic.Int64 // scripts sent on their own
	loads                  atomic.Int64 // FUNCTION LOADs
	fcalls                 atomic.Int64 // FCALLs in pipelines
	evalshaPipes           atomic.Int64 // pipelines that carry an EVALSHA

	mu      sync.Mutex
	batches [][]string // the lock keys of each renewal pipeline, when recording
	record  bool
	hold    chan struct{} // the next pipeline waits for it to close
	held    chan []string // receives the held pipeline's keys
	onLoad  func()        // runs once, after the next FUNCTION LOAD returned
}

func (h *traffic) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *traffic) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		load := false
		if a := cmd.Args(); len(a) > 1 && strings.EqualFold(cmd.Name(), "function") && strings.EqualFold(fmt.Sprint(a[1]), "load") {
			h.loads.Add(1)
			load = true
		}
		if testenv.ScriptCall(cmd.Name()) {
			h.singles.Add(1)
		}
		err := next(ctx, cmd)
		if load {
			h.mu.Lock()
			f := h.onLoad
			h.onLoad = nil
			h.mu.Unlock()
			if f != nil {
				f()
			}
		}
		return err
	}
}

// afterLoad has f run once, right after the next FUNCTION LOAD returned.
func (h *traffic) afterLoad(f func()) {
	h.mu.Lock()
	h.onLoad = f
	h.mu.Unlock()
}

func (h *traffic) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipes.Add(1)
		h.pipeCmds.Add(int64(len(cmds)))
		var keys []string
		evalsha := false
		for _, c := range cmds {
			a := c.Args()
			if strings.EqualFold(c.Name(), "eval") {
				h.evals.Add(1)
			}
			evalsha = evalsha || strings.EqualFold(c.Name(), "evalsha")
			if strings.EqualFold(c.Name(), "fcall") {
				h.fcalls.Add(1)
			}
			if len(a) > 3 {
				keys = append(keys, fmt.Sprint(a[3])) // a string, or the scripts' own argument type
			}
		}
		if evalsha {
			h.evalshaPipes.Add(1)
		}
		h.mu.Lock()
		if h.record {
			h.batches = append(h.batches, keys)
		}
		hold := h.hold
		h.hold = nil
		h.mu.Unlock()
		if hold != nil {
			h.held <- keys
			<-hold
		}
		return next(ctx, cmds)
	}
}

func (h *traffic) reset() {
	h.pipes.Store(0)
	h.pipeCmds.Store(0)
	h.evals.Store(0)
	h.singles.Store(0)
	h.loads.Store(0)
	h.fcalls.Store(0)
	h.evalshaPipes.Store(0)
}

// holdNext makes the next pipeline wait until the returned func is called.
func (h *traffic) holdNext() (held <-chan []string, release func()) {
	hold, ch := make(chan struct{}), make(chan []string, 1)
	h.mu.Lock()
	h.hold, h.held = hold, ch
	h.mu.Unlock()
	return ch, sync.OnceFunc(func() { close(hold) })
}

// lockMany takes n distinct names, each with its own owner, on 8 workers.
func lockMany(t *testing.T, c *reentrant.Client, n int) []*reentrant.Lease {
	t.Helper()
	base := testenv.Unique(t)
	leases := make([]*reentrant.Lease, n)
	var g errgroup.Group
	g.SetLimit(8)
	for i := range leases {
		g.Go(func() (err error) {
			leases[i], err = c.Lock(t.Context(), base+"-"+strconv.Itoa(i))
			return err
		})
	}
	require.NoError(t, g.Wait())
	return leases
}

// waitAllRenewed waits, at most a minute, until every lease has been
// renewed since the call (its local deadline moved on), and fails t if one
// ended instead.
func waitAllRenewed(t *testing.T, leases []*reentrant.Lease) {
	t.Helper()
	from := make([]time.Time, len(leases))
	for i, l := range leases {
		from[i] = reentrant.LocalDeadline(l)
	}
	require.Eventually(t, func() bool {
		for i, l := range leases {
			if l.Err() == nil && !reentrant.LocalDeadline(l).After(from[i]) {
				return false
			}
		}
		return true
	}, time.Minute, 10*time.Millisecond)
	for _, l := range leases {
		require.NoError(t, l.Err(), "lease %q ended instead of being renewed", l.Name())
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// 10,000 leases of one Client stay alive through two TTLs on renewal
// alone, and their renewals cost about one round trip per tick, not one per
// lease: the renewer batches every due renewal into one pipeline.
func TestRenewer10kLeasesOnePipelinePerTick(t *testing.T) {
	// A 5 s TTL: a pipeline of 10,000 renewals under -race on a loaded
	// two-core machine must come back within the lease (TTL less margin);
	// 3 s once did not, with CI and a CPU-saturating run side by side.
	// 10 s: a CI rehearsal at load 16 lost one at 5 s.
	const n, ttl = 10_000, 10 * time.Second
	rdb := testenv.Redis(t)
	h := &traffic{}
	rdb.AddHook(h)
	c, err := reentrant.New(rdb, reentrant.WithPrefix(prefix), reentrant.WithTTL(ttl))
	require.NoError(t, err)
	leases := lockMany(t, c, n)

	h.reset()
	start, cpu := time.Now(), cpuTime()
	time.Sleep(2 * ttl)
	took, used := time.Since(start), cpuTime()-cpu
	pipes, renewals, singles := h.pipes.Load(), h.pipeCmds.Load(), h.singles.Load()
	for _, l := range leases {
		select {
		case <-l.Done():
			t.Fatalf("lease %q ended while renewed: %v", l.Name(), l.Err())
		default:
		}
	}
	for i := 0; i < n; i += n / 100 {
		st, err := c.Inspect(t.Context(), leases[i].Name())
		require.NoError(t, err)
		require.True(t, st.Held, leases[i].Name())
		require.Equal(t, string(leases[i].Owner()), st.Owner)
		require.Equal(t, leases[i].Token(), st.Token)
	}
	ticks := int64(took / (ttl / 3 / 4))
	t.Logf("%d leases over %v: %d renewal pipelines (%d ticks) carrying %d renewals, %d scripts sent on their own; CPU %v (%.0f%% of one core)",
		n, took.Round(time.Millisecond), pipes, ticks, renewals, singles, used.Round(time.Millisecond), 100*used.Seconds()/took.Seconds())
	require.GreaterOrEqual(t, renewals, int64(3*n), "every lease must have been renewed at least three times")
	require.LessOrEqual(t, pipes, 2*ticks, "about one pipeline per tick (two when a tick meets NOSCRIPT)")
	require.Less(t, pipes*100, renewals, "round trips must be far fewer than renewals")
	require.Zero(t, singles, "no renewal may travel on its own")

	require.NoError(t, c.Close())
	for _, l := range leases {
		require.ErrorIs(t, l.Err(), reentrant.ErrClosed)
	}
}

// Flushes between renewals. With Functions, FUNCTION FLUSH: the batch's
// FCALLs are answered that the function is missing, the renewer loads the
// library and sends them again; a batch whose reload a flush undid before
// they were re-sent goes as EVALSHA (and EVAL on NOSCRIPT), that once, and
// the next batch as FCALL again. Without (FUNCTION and FCALL renamed away),
// SCRIPT FLUSH: its EVALSHAs are answered NOSCRIPT and re-sent with EVAL.
// Every renewal is confirmed either way.
//
// Each case is forced, not left to where a flush happens to land: a 30 s
// TTL keeps the background renewer idle (due after 10 s), and each round
// flushes, then sends one RenewAllNow batch of every lease.
func TestRenewalSurvivesScriptFlush(t *testing.T) {
	eachScriptPath(t, func(t *testing.T, p scriptPath) {
		const n = 50
		srv := redisproc.Start(t, redisproc.WithArgs(p.args...))
		rdb, admin := srv.Client(), srv.Client()
		h := &traffic{}
		rdb.AddHook(h)
		c := newClient(t, rdb, reentrant.WithTTL(30*time.Second))
		leases := lockMany(t, c, n)
		flush := func() {
			if p.functions {
				require.NoError(t, admin.FunctionFlush(t.Context()).Err())
			} else {
				require.NoError(t, admin.ScriptFlush(t.Context()).Err())
			}
		}
		// round renews every lease in one batch and checks that each
		// renewal was confirmed (its local deadline moved on).
		round := func(what string) {
			t.Helper()
			before := make([]time.Time, n)
			for i, l := range leases {
				before[i] = reentrant.LocalDeadline(l)
			}
			h.reset()
			require.Equal(t, n, reentrant.RenewAllNow(c), what)
			for i, l := range leases {
				require.NoError(t, l.Err(), what)
				require.True(t, reentrant.LocalDeadline(l).After(before[i]), "%s: lease %q not renewed", what, l.Name())
			}
			t.Logf("%s: %d pipelines, %d FCALLs, %d with EVALSHA, %d EVAL re-sends, %d library loads",
				what, h.pipes.Load(), h.fcalls.Load(), h.evalshaPipes.Load(), h.evals.Load(), h.loads.Load())
		}
		if !p.functions {
			for i := range 3 {
				flush()
				round(fmt.Sprintf("after SCRIPT FLUSH %d", i))
				require.Zero(t, h.fcalls.Load(), "a client without Functions renews with EVALSHA")
				require.EqualValues(t, 1, h.evalshaPipes.Load(), "one EVALSHA batch")
				require.EqualValues(t, n, h.evals.Load(), "each NOSCRIPT re-sent with EVAL")
			}
			return
		}
		for i := range 2 {
			flush()
			round(fmt.Sprintf("after FUNCTION FLUSH %d", i))
			require.EqualValues(t, 1, h.loads.Load(), "the library must have been loaded again")
			require.EqualValues(t, 2*n, h.fcalls.Load(), "every FCALL sent again after the load")
			require.Zero(t, h.evalshaPipes.Load(), "no batch goes as a script while the library loads")
		}
		// A flush right after the reload: the re-sent FCALLs find the
		// function missing again, and the batch goes as a script.
		flush()
		h.afterLoad(func() { flush() })
		round("a flush between the reload and the re-sent FCALLs")
		require.EqualValues(t, 1, h.loads.Load())
		require.EqualValues(t, 1, h.evalshaPipes.Load(), "the batch goes as EVALSHA, once")
		require.EqualValues(t, n, h.evals.Load(), "each NOSCRIPT re-sent with EVAL")
		// And the client still takes the server for one with Functions.
		round("after it")
		require.Positive(t, h.fcalls.Load(), "the renewals after the flushes go as FCALL")
		require.Zero(t, h.evalshaPipes.Load())
	})
}

// One batch that finds some ownerships gone (key deleted), one refused
// (a foreign value at the key) and the rest held: the gone ones end with
// ErrLost at once, the refused one with ErrLost wrapping ErrForeign, and the
// others stay, confirmed by that same batch.
//
// The batch is forced rather than hoped for: a 30 s TTL keeps the
// background renewer idle for its 10 s renew interval, RenewAllNow sends
// every ownership in one pipeline, and the hook holds that pipeline until
// the keys have been changed, so the replies are about the very batch the
// hook saw.
func TestRenewalBatchMixesLostAndHeld(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		const n, ttl = 20, 30 * time.Second
		h := &traffic{}
		b.Client.AddHook(h)
		c := newClient(t, b.Client, reentrant.WithTTL(ttl))
		leases := lockMany(t, c, n)
		key := func(l *reentrant.Lease) string { return scripts.KeysFor(prefix, l.Name()).Lock }
		lost, foreign, kept := leases[:3], leases[3], leases[4:]
		before := make([]time.Time, len(kept))
		for i, l := range kept {
			before[i] = reentrant.LocalDeadline(l)
		}

		held, release := h.holdNext()
		defer release()
		sent := make(chan int, 1)
		go func() { sent <- reentrant.RenewAllNow(c) }()
		var batch []string
		select {
		case batch = <-held:
		case <-time.After(30 * time.Second):
			t.Fatal("RenewAllNow sent no pipeline")
		}
		for _, l := range leases {
			require.Contains(t, batch, key(l), "the held batch must carry every ownership")
		}
		for _, l := range lost {
			require.NoError(t, b.Client.Del(t.Context(), key(l)).Err())
		}
		require.NoError(t, b.Client.Del(t.Context(), key(foreign)).Err())
		require.NoError(t, b.Client.HSet(t.Context(), key(foreign), "mine", "1").Err())
		release()
		require.Equal(t, n, <-sent, "one batch carried every ownership")

		for _, l := range append(lost, foreign) {
			select {
			case <-l.Done():
			case <-time.After(30 * time.Second):
				t.Fatalf("%q: a renewal that finds the lock gone must end the lease", l.Name())
			}
			require.ErrorIs(t, l.Err(), reentrant.ErrLost)
		}
		for _, l := range lost {
			require.ErrorContains(t, l.Err(), "renewal found it gone")
		}
		require.ErrorIs(t, foreign.Err(), reentrant.ErrForeign)
		// RenewAllNow applied the replies before returning: the held ones
		// of the same batch were confirmed by it, not merely left alone.
		for i, l := range kept {
			require.NoError(t, l.Err())
			require.True(t, reentrant.LocalDeadline(l).After(before[i]),
				"%q: held in the batch that found others gone, it must have been renewed by it", l.Name())
		}
	})
}

// Close stops the renewer and leaves no goroutine behind, also while
// renewals are flowing. (Real Redis only: miniredis's own connection
// goroutines would count.)
func TestCloseStopsTheRenewer(t *testing.T) {
	rdb := testenv.Redis(t)
	ignore := goleak.IgnoreCurrent()
	// Renewals every 100 ms, and a TTL no loaded scheduler outlasts: a
	// lease lost before Close would end with ErrUnconfirmed instead.
	c, err := reentrant.New(rdb, reentrant.WithPrefix(prefix), reentrant.WithTTL(time.Minute),
		reentrant.WithRenewInterval(100*time.Millisecond))
	require.NoError(t, err)
	leases := lockMany(t, c, 20)
	waitRenewed(t, leases[len(leases)-1], 0) // renewals are flowing
	require.NoError(t, c.Close())
	for _, l := range leases {
		require.ErrorIs(t, l.Err(), reentrant.ErrClosed)
	}
	goleak.VerifyNone(t, ignore)
}

// The renewer works on a Cluster client: go-redis splits each tick's
// pipeline by node, and leases on every node are renewed (their local
// deadlines move on, which only a reply saying they are held does).
// Renewals every 100 ms, and a TTL no loaded scheduler outlasts, so that
// no lease ends while the test waits.
func TestRenewerOnCluster(t *testing.T) {
	const n = 300
	cc := startCluster(t, 3)
	var perNode sync.Map // addr -> *atomic.Int64
	cc.OnNewNode(func(node *redis.Client) {
		ctr, _ := perNode.LoadOrStore(node.Options().Addr, &atomic.Int64{})
		node.AddHook(testenv.Hook{Sent: func(_ []redis.Cmder, pipe bool) {
			if pipe {
				ctr.(*atomic.Int64).Add(1)
			}
		}})
	})
	c := newClient(t, cc, reentrant.WithTTL(time.Minute), reentrant.WithRenewInterval(100*time.Millisecond))
	leases := lockMany(t, c, n)
	waitAllRenewed(t, leases)
	nodes := 0
	perNode.Range(func(addr, ctr any) bool {
		if ctr.(*atomic.Int64).Load() > 0 {
			nodes++
		}
		t.Logf("%s: %d pipelines", addr, ctr.(*atomic.Int64).Load())
		return true
	})
	require.Equal(t, 3, nodes, "every node must have received renewal pipelines")
}

// startCluster starts a Redis Cluster of n primaries on loopback and
// returns a client of it, closed when the test ends.
func startCluster(t *testing.T, n int) *redis.ClusterClient {
	t.Helper()
	return redisproc.StartCluster(t, redisproc.ClusterConfig{Masters: n}).Client()
}

// A renewal pipeline sent to a frozen server (SIGSTOP; go-redis defaults,
// which ignore context deadlines on reads) never returns in time; every
// lease of the batch still ends by its local timer, the margin before
// Redis could expire it.
func TestFrozenServerEndsBatchedLeasesBeforeTTL(t *testing.T) {
	const n, ttl = 200, time.Second
	srv := redisproc.Start(t)
	c := newClient(t, srv.Client(), reentrant.WithTTL(ttl))
	leases := lockMany(t, c, n)
	time.Sleep(ttl / 2) // renewals confirmed
	srv.Pause()
	paused := time.Now()
	defer srv.Resume() // before Close, which waits for the pipeline in flight
	for _, l := range leases {
		awaitDone(t, l, 20*ttl)
		require.ErrorIs(t, l.Err(), reentrant.ErrLost)
		// Every lease ends by TTL - margin after its last confirmed
		// renewal, which was sent before the pause.
		dl := reentrant.LocalDeadline(l)
		require.LessOrEqual(t, dl.Sub(paused), ttl-ttl/10, "lease %d: deadline past TTL - margin after the pause", l.Token())
		require.False(t, time.Now().Before(dl), "lease %d ended before its deadline", l.Token())
	}
}

// A pipeline that hangs does not hold the renewer back: ownerships taken
// meanwhile are renewed in later ticks, while the hung batch's ownerships
// are not sent again and end by their local timer.
//
// With ContextTimeoutEnabled too, where calls run inline: the batch still
// runs off the renewer's loop.
func TestRenewerNotHeldBackByHungPipeline(t *testing.T) {
	for _, enforce := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", enforce), func(t *testing.T) {
			renewerNotHeldBack(t, redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), ContextTimeoutEnabled: enforce}))
		})
	}
}

func renewerNotHeldBack(t *testing.T, rdb *redis.Client) {
	const ttl = 600 * time.Millisecond // the hung lease's: it ends by its timer
	t.Cleanup(func() { _ = rdb.Close() })
	h := &traffic{}
	rdb.AddHook(h)
	c := newClient(t, rdb, reentrant.WithTTL(ttl))
	stuck, err := c.Lock(t.Context(), testenv.Unique(t))
	require.NoError(t, err)
	held, release := h.holdNext()
	t.Cleanup(release) // runs before the client's Close, which waits for it
	var hung []string
	select {
	case hung = <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("no renewal pipeline was sent")
	}
	require.Equal(t, []string{scripts.KeysFor(prefix, stuck.Name()).Lock}, hung)

	h.mu.Lock()
	h.record = true
	h.mu.Unlock()
	// The fresh lease has a TTL no loaded scheduler outlasts, and renewals
	// every 100 ms: only the hung pipeline can keep it from being renewed.
	fresh, err := c.Lock(t.Context(), testenv.Unique(t), reentrant.WithTTL(time.Minute),
		reentrant.WithRenewInterval(100*time.Millisecond))
	require.NoError(t, err)
	awaitDone(t, stuck, 30*time.Second)
	require.ErrorIs(t, stuck.Err(), reentrant.ErrUnconfirmed, "the hung batch's lease must be ended by its timer")
	// Renewed by later ticks while the hung pipeline still hangs.
	waitAllRenewed(t, []*reentrant.Lease{fresh})
	waitAllRenewed(t, []*reentrant.Lease{fresh})

	h.mu.Lock()
	defer h.mu.Unlock()
	require.NotEmpty(t, h.batches)
	for _, b := range h.batches {
		require.NotContains(t, b, hung[0], "a renewal in flight must not be sent again")
	}
	release()
}

// The logger hears about lost leases and failed renewals; the observer
// sees every event with its lock and token.
func TestLoggerAndObserver(t *testing.T) {
	m, rdb := testenv.Mini(t)
	var logs bytes.Buffer
	var mu sync.Mutex
	var events []reentrant.Event
	c := newClient(t, rdb, reentrant.WithTTL(time.Minute), reentrant.WithRenewInterval(100*time.Millisecond),
		reentrant.WithLogger(slog.New(slog.NewTextHandler(&syncWriter{w: &logs, mu: &mu}, nil))),
		reentrant.WithObserver(func(e reentrant.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }))
	ctx, name := t.Context(), testenv.Unique(t)
	l, err := c.Lock(ctx, name)
	require.NoError(t, err)
	in, err := c.Lock(l.Context(), name)
	require.NoError(t, err)
	_, err = c.TryLock(ctx, name)
	require.ErrorIs(t, err, reentrant.ErrNotAcquired)
	require.Eventually(t, func() bool { return count(&mu, &events, reentrant.Renewed) > 0 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, in.Unlock(ctx))
	require.NoError(t, l.Unlock(ctx))

	l, err = c.Lock(ctx, name)
	require.NoError(t, err)
	m.Del(scripts.KeysFor(prefix, name).Lock) // the lock vanishes: the next renewal finds it gone
	awaitDone(t, l, 30*time.Second)
	require.Eventually(t, func() bool { return count(&mu, &events, reentrant.Lost) == 1 }, 30*time.Second, 5*time.Millisecond,
		"one loss reported; events: %v", eventList{&mu, &events})

	mu.Lock()
	defer mu.Unlock()
	kinds := map[reentrant.EventKind]int{}
	for _, e := range events {
		require.Equal(t, name, e.Name)
		kinds[e.Kind]++
		switch e.Kind {
		case reentrant.Acquired, reentrant.Reentered:
			require.NotZero(t, e.Token)
		case reentrant.NotAcquired:
			require.ErrorIs(t, e.Err, reentrant.ErrNotAcquired)
		case reentrant.Lost:
			require.ErrorIs(t, e.Err, reentrant.ErrLost)
		}
	}
	require.Equal(t, 2, kinds[reentrant.Acquired])
	require.Equal(t, 1, kinds[reentrant.Reentered])
	require.Equal(t, 1, kinds[reentrant.NotAcquired])
	require.Equal(t, 1, kinds[reentrant.Released], "one release: the reentry's Unlock released no lock")
	require.Contains(t, logs.String(), "level=WARN msg=\"reentrant: lease lost\" name="+name)
	require.Equal(t, "renew_failed", reentrant.RenewFailed)
}

// eventList prints the events recorded so far, when a failure is reported.
type eventList struct {
	mu     *sync.Mutex
	events *[]reentrant.Event
}

func (l eventList) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, e := range *l.events {
		fmt.Fprintf(&b, "\n%s token %d %v", e.Kind, e.Token, e.Err)
	}
	return b.String()
}

func count(mu *sync.Mutex, events *[]reentrant.Event, k reentrant.EventKind) int {
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, e := range *events {
		if e.Kind == k {
			n++
		}
	}
	return n
}

type syncWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// A lock handed to a waiter is renewed at half its claim window, not at
// once: taking it must not cost a renewal round trip of its own.
//
// Checked against the promise's own bound, which a slow machine can only
// make later: a 4 s handoff timeout gives a 2 s claim, a window of 1.8 s
// (less the margin in the TTL's proportion) from when the waiter queued,
// and a first renewal due 0.9 s after that; the renewer's ticks (a quarter
// of the 1 s renew interval) may pick it up one tick early, no sooner. So
// no renewal of it may be sent before the wait began + 0.65 s; one made at
// once would leave within milliseconds of the handoff.
func TestHandedLockNotRenewedAtOnce(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		const handoff, renew = 4 * time.Second, time.Second
		ctx, name := t.Context(), testenv.Unique(t)
		key := scripts.KeysFor(prefix, name).Lock
		var mu sync.Mutex
		var renewalsSent []time.Time
		b.Client.AddHook(testenv.Hook{Sent: func(cmds []redis.Cmder, pipe bool) {
			if !pipe { // renewals go in pipelines, acquisitions and releases on their own
				return
			}
			for _, c := range cmds {
				if a := c.Args(); len(a) > 3 && fmt.Sprint(a[3]) == key {
					mu.Lock()
					renewalsSent = append(renewalsSent, time.Now())
					mu.Unlock()
				}
			}
		}})
		c := newClient(t, b.Client, reentrant.WithTTL(time.Minute), reentrant.WithRenewInterval(renew),
			reentrant.WithHandoffTimeout(handoff))
		other, err := c.Lock(ctx, name+"-other") // the renewer ticks
		require.NoError(t, err)
		holder, err := c.Lock(ctx, name)
		require.NoError(t, err)
		waitBegan := time.Now()
		got := queuedLock(t, ctx, c, name)
		require.NoError(t, holder.Unlock(ctx))
		taken := handed(t, got, "the waiter must be handed the lock")
		waitRenewed(t, taken, 0)
		earliest := waitBegan.Add((handoff/2-handoff/2/10)/2 - renew/4)
		mu.Lock()
		require.NotEmpty(t, renewalsSent, "the handed lock's renewal was not seen")
		for _, at := range renewalsSent {
			require.False(t, at.Before(earliest), "a handed lock was renewed %v after the wait began, before its first renewal was due",
				at.Sub(waitBegan))
		}
		mu.Unlock()
		require.NoError(t, taken.Unlock(ctx))
		require.NoError(t, other.Unlock(ctx))
	})
}

// Leases released in random order leave the renewer's schedule at once:
// none of them is renewed after its release, every other lease goes on
// being renewed and stays held, and the renewer stops once the last is
// released.
func TestReleasedLeasesLeaveTheRenewalSchedule(t *testing.T) {
	rdb := testenv.Redis(t)
	h := &traffic{}
	rdb.AddHook(h)
	ignore := goleak.IgnoreCurrent()
	// Renewals every 100 ms, and a TTL no loaded scheduler outlasts (see
	// TestCloseStopsTheRenewer).
	const n = 60
	c, err := reentrant.New(rdb, reentrant.WithPrefix(prefix), reentrant.WithTTL(time.Minute),
		reentrant.WithRenewInterval(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	leases := lockMany(t, c, n)
	keys := map[string]*reentrant.Lease{}
	for _, l := range leases {
		keys[scripts.KeysFor(prefix, l.Name()).Lock] = l
	}
	order := rand.Perm(n)
	released := map[*reentrant.Lease]bool{}
	for _, i := range order[:n/2] {
		require.NoError(t, leases[i].Unlock(t.Context()))
		released[leases[i]] = true
	}
	h.mu.Lock()
	h.record = true
	h.mu.Unlock()
	// Every lease left is renewed at least once after the releases: its
	// local deadline moves on.
	var left []*reentrant.Lease
	for _, i := range order[n/2:] {
		left = append(left, leases[i])
	}
	waitAllRenewed(t, left)
	h.mu.Lock()
	h.record = false
	renewed := map[*reentrant.Lease]int{}
	for _, b := range h.batches {
		for _, k := range b {
			renewed[keys[k]]++
		}
	}
	h.mu.Unlock()
	for l := range released {
		require.Zero(t, renewed[l], "released lease %q was renewed", l.Name())
	}
	for _, i := range order[n/2:] {
		l := leases[i]
		require.NoError(t, l.Err())
		require.Positive(t, renewed[l], "lease %q was not renewed", l.Name())
		st, err := c.Inspect(t.Context(), l.Name())
		require.NoError(t, err)
		require.True(t, st.Held && st.Token == l.Token(), "lease %q: %+v", l.Name(), st)
	}
	for _, i := range order[n/2:] {
		require.NoError(t, leases[i].Unlock(t.Context()))
	}
	// The renewer's goroutine exits at its next tick (a quarter of the renew interval).
	require.Eventually(t, func() bool { return goleak.Find(ignore) == nil }, time.Minute, 10*time.Millisecond)
}

// Err reports a lease whose local deadline has passed as lost even before
// the timer that ends it runs (a resumed process's goroutine may run
// first), and ends its context then.
func TestErrReadsTheDeadline(t *testing.T) {
	_, rdb := testenv.Mini(t)
	c := newClient(t, rdb)
	l, err := c.Lock(t.Context(), "paused", reentrant.WithTTL(200*time.Millisecond), reentrant.WithoutRenewal())
	require.NoError(t, err)
	reentrant.StopTimer(l)
	require.NoError(t, l.Err())
	time.Sleep(time.Until(reentrant.LocalDeadline(l)))
	for !time.Now().After(reentrant.LocalDeadline(l)) {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-l.Done():
		t.Fatal("the stopped timer ended the lease")
	default:
	}
	require.ErrorIs(t, l.Err(), reentrant.ErrUnconfirmed)
	select {
	case <-l.Done(): // Err set the timer to run at once
	case <-time.After(time.Minute):
		t.Fatal("Err found the lease lost but its context never ended")
	}
	require.ErrorIs(t, l.Err(), reentrant.ErrUnconfirmed)
}

// A loss found by the timer and by Err at once is reported once.
func TestLossReportedOnce(t *testing.T) {
	_, rdb := testenv.Mini(t)
	var lost atomic.Int32
	c := newClient(t, rdb, reentrant.WithObserver(func(e reentrant.Event) {
		if e.Kind == reentrant.Lost {
			lost.Add(1)
		}
	}))
	for range 10 {
		l, err := c.Lock(t.Context(), testenv.Unique(t), reentrant.WithTTL(100*time.Millisecond), reentrant.WithoutRenewal())
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for l.Err() == nil {
				}
			})
		}
		wg.Wait()
		<-l.Done()
	}
	require.Eventually(t, func() bool { return lost.Load() == 10 }, time.Minute, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	require.EqualValues(t, 10, lost.Load(), "each loss once")
}
