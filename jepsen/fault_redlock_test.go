//go:build unix

package jepsen_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/netfault"
	"github.com/redfence/redfence/internal/redisproc"
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
				s.Kill()
				time.Sleep(200 * time.Millisecond)
				s.Restart()
			}},
			{"kill-restart-no-aof", false, func(s *redisproc.Server, _ *netfault.Proxy) {
				s.Kill()
				time.Sleep(200 * time.Millisecond)
				s.Restart()
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
	cfg.newLock = func(_ int, lockOpts []reentrant.Option) (*reentrant.Client, error) {
		nodes := make([]redis.UniversalClient, n)
		for i, s := range srvs {
			nodes[i] = s.Client(func(o *redis.Options) { *o = *faultRedisOptions(proxies[i].Addr()) })
		}
		return reentrant.NewRedlock(nodes, lockOpts...)
	}
	w := faultStartWorkers(t, cfg, nil, store)
	time.Sleep(800 * time.Millisecond)
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
