//go:build unix

package jepsen_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testkit/netfault"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage/memory"
)

// Scenario: Redlock over 3 and 5 redis-server processes, one of 3 or two
// of 5 of them failing while holders lock and write to a memory store:
//
//   - pause: SIGSTOP past the lease, then SIGCONT;
//   - kill-restart-aof: SIGKILL, restart with appendfsync always;
//   - kill-restart-no-aof: SIGKILL, restart empty (its counters reset);
//   - slow: the fault proxy delays every reply of those nodes.
//
// The oracle must find no stale write accepted; mutual-exclusion overlaps
// and repeated tokens are counted and reported. A minority failing keeps
// a majority that remembers every token handed out, so no token may repeat.
func TestFaultRedlock(t *testing.T) {
	cycles, down := 1, time.Second
	if faultLong() {
		cycles, down = 3, 3*time.Second
	}
	for _, n := range []int{3, 5} {
		bad := n / 2 // the largest minority
		faults := []struct {
			name  string
			aof   bool
			fault func(s *redisproc.Server, p *netfault.Proxy)
		}{
			{"pause", false, func(s *redisproc.Server, _ *netfault.Proxy) { s.Pause(); time.Sleep(down); s.Resume() }},
			{"kill-restart-aof", true, func(s *redisproc.Server, _ *netfault.Proxy) {
				s.Crash(200 * time.Millisecond)
			}},
			{"kill-restart-no-aof", false, func(s *redisproc.Server, _ *netfault.Proxy) {
				s.Crash(200 * time.Millisecond)
			}},
			{"slow", false, func(_ *redisproc.Server, p *netfault.Proxy) {
				p.SetLatency(netfault.Downstream, 150*time.Millisecond)
				time.Sleep(down)
				p.SetLatency(netfault.Downstream, 0)
			}},
		}
		for _, f := range faults {
			scenario := fmt.Sprintf("redlock-%d/%s", n, f.name)
			t.Run(fmt.Sprintf("%d/%s", n, f.name), func(t *testing.T) {
				t.Parallel() // see TestMain
				r := runFaultRedlock(t, scenario, n, bad, cycles, f.aof, f.fault)
				if r.TokensRepeated != 0 {
					t.Errorf("%s: a majority remembered every token, yet tokens %v repeated", scenario, r.Repeated)
				}
				t.Logf("%s: %d acquisitions, %d mutual-exclusion overlaps, %d tokens repeated, %d stale writes accepted",
					scenario, r.Acquisitions, r.MutexViolations, r.TokensRepeated, r.StaleAccepted)
			})
		}
	}
}

// runFaultRedlock runs holders on a Redlock of n fresh redis-servers, each
// behind a fault proxy, applies fault to the first bad of them cycles times
// at once, and checks the history.
func runFaultRedlock(t *testing.T, scenario string, n, bad, cycles int, aof bool, fault func(*redisproc.Server, *netfault.Proxy)) faultReport {
	var opts []redisproc.Option
	if aof {
		opts = append(opts, redisproc.WithAOF("always"))
	}
	srvs := make([]*redisproc.Server, n)
	proxies := make([]*netfault.Proxy, n)
	for i := range srvs {
		srvs[i] = redisproc.Start(t, opts...)
		p, err := netfault.New(srvs[i].Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		proxies[i] = p
	}
	store := memory.New()
	cfg := faultWorkersSize()
	cfg.newLock = func(_ int, lockOpts []reentrant.ClientOption) (*reentrant.Client, error) {
		nodes := make([]redis.UniversalClient, n)
		for i, s := range srvs {
			nodes[i] = s.Client(func(o *redis.Options) { *o = *faultRedisOptions(proxies[i].Addr()) })
		}
		return reentrant.NewRedlock(nodes, lockOpts...)
	}
	w := faultStartWorkers(t, cfg, nil, store)
	time.Sleep(800 * time.Millisecond)
	w.awaitGrant(t, 0) // the check below wants acquisitions: force one
	for range cycles {
		done := make(chan struct{}, bad)
		for i := range bad {
			go func() {
				fault(srvs[i], proxies[i])
				done <- struct{}{}
			}()
		}
		for range bad {
			<-done
		}
		time.Sleep(1200 * time.Millisecond)
	}
	ops := w.stop(t)
	r := faultCheck(scenario, ops, faultFinal(t, store, w.keys))
	faultRecord(t, r)
	if r.Acquisitions == 0 {
		t.Errorf("%s: no acquisition at all", scenario)
	}
	return r
}

// Scenario: issue 18's Redlock load. Four holders contend on one name and
// write through a fenced store while, for 20 s, any single node of 3 (and
// of 5) is SIGKILLed and restarted empty every 0.6 to 1.2 s. Holder i
// cannot reach the n/2 nodes from i mod n on (a partial partition), so it
// works on a bare majority and a token often lives on one only, and a node restarted empty may be the one that
// remembered it while the other that did is out of the next holder's
// reach: Kleppmann's scenario, at load. A token must never
// repeat, no write under an ownership whose token a later one had used may
// be accepted, an acquisition that began after another ended must get the
// higher token, no two holds may overlap in time (none is paused), and the
// lock must make progress: 20 ownerships at least.
func TestFaultRedlockRestartEmpty(t *testing.T) {
	run := 20 * time.Second
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel() // see TestMain
			scenario := fmt.Sprintf("redlock-%d/restart-empty-load", n)
			srvs := make([]*redisproc.Server, n)
			for i := range srvs {
				srvs[i] = redisproc.Start(t)
			}
			store := memory.New()
			cfg := faultWorkersSize()
			cfg.workers = 4
			cfg.newLock = func(holder int, lockOpts []reentrant.ClientOption) (*reentrant.Client, error) {
				nodes := make([]redis.UniversalClient, n)
				for i, s := range srvs {
					addr := s.Addr()
					if (i-holder%n+n)%n < n/2 {
						addr = "127.0.0.1:1" // nobody listens: cut off
					}
					nodes[i] = s.Client(func(o *redis.Options) { *o = *faultRedisOptions(addr) })
				}
				return reentrant.NewRedlock(nodes, lockOpts...)
			}
			w := faultStartWorkers(t, cfg, nil, store)
			kills := 0
			// The kills go on for the run, and past it until the holders
			// have made progress (at most 2 min): progress is the check,
			// not how much of it a loaded machine makes in 20 s.
			progressed := func() bool {
				n := 0
				for _, op := range w.hist.snapshot() {
					if op.Kind == faultLock && op.Outcome == faultOK {
						n++
					}
				}
				return n >= 20
			}
			for end, ceiling := time.Now().Add(run), time.Now().Add(2*time.Minute); time.Now().Before(end) ||
				!progressed() && time.Now().Before(ceiling); kills++ {
				time.Sleep(600*time.Millisecond + rand.N(600*time.Millisecond))
				s := srvs[rand.N(n)]
				s.Crash(0)
			}
			ops := w.stop(t)
			r := faultCheck(scenario, ops, faultFinal(t, store, w.keys))
			faultRecord(t, r)
			if r.TokensRepeated != 0 {
				t.Errorf("%s: tokens %v repeated", scenario, r.Repeated)
			}
			if r.StaleAccepted != 0 {
				t.Errorf("%s: %d stale writes accepted", scenario, r.StaleAccepted)
			}
			// No holder is paused here, so no two may believe they hold
			// the lock at once: a node restarted empty votes for nobody
			// until every lease it may have granted has run out.
			if r.MutexViolations != 0 {
				t.Errorf("%s: %d pairs of holds overlapped", scenario, r.MutexViolations)
			}
			if back := faultOutOfOrder(ops); back != "" {
				t.Errorf("%s: %s", scenario, back)
			}
			if r.Acquisitions < 20 {
				t.Errorf("%s: %d ownerships in 2 min, want at least 20", scenario, r.Acquisitions)
			}
			t.Logf("%s: %d kills, %d acquisitions, %d writes accepted, %d refused, %d overlaps, %d repeated",
				scenario, kills, r.Acquisitions, r.Accepted, r.Refused, r.MutexViolations, r.TokensRepeated)
		})
	}
}

// faultOutOfOrder returns, for the first pair of successful acquisitions in
// which one began after the other had returned and yet got a token no
// higher, a description of it; "" when tokens follow real time.
func faultOutOfOrder(ops []faultOp) string {
	var locks []faultOp
	for _, op := range ops {
		if op.Kind == faultLock && op.Outcome == faultOK {
			locks = append(locks, op)
		}
	}
	for _, a := range locks {
		for _, b := range locks {
			if a.End < b.Start && b.Token <= a.Token {
				return fmt.Sprintf("proc %d's acquisition began after proc %d's returned token %d, yet got token %d", b.Proc, a.Proc, a.Token, b.Token)
			}
		}
	}
	return ""
}
