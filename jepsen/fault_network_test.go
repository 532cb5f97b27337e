//go:build unix

package jepsen_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testkit/netfault"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/storage/memory"
)

// Scenario 3: the network between the holders and the lock's Redis is
// slowed, cut and reset. Each holder reaches Redis through its own
// internal/testkit/netfault proxy, so a fault can hit every holder or only the one
// that holds the lock; the store (memory) is not behind a proxy, so a
// holder cut off from Redis still reaches it, which is the case fencing is
// for. Critical sections outlast the TTL here, so a partitioned holder is
// still writing when its lease runs out and another takes the lock.
//
// Faults, in order: 40 ms latency each way; a full partition of the
// current holder past its lease; replies dropped (commands run, answers
// lost: unknown outcomes); one reply per connection held past the read
// timeout (go-redis retries a command Redis already ran); connection
// resets; new connections refused while live ones are reset.
func TestFaultNetwork(t *testing.T) { runFaultNetwork(t) }

func runFaultNetwork(t *testing.T) faultReport {
	cycles := 1
	if faultLong() {
		cycles = 4
	}
	srv := redisproc.Start(t)
	cfg := faultWorkersSize()
	cfg.steps, cfg.gap = 10, 60*time.Millisecond
	proxies := make([]*netfault.Proxy, cfg.workers)
	for i := range proxies {
		p, err := netfault.New(srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() }) // after the holders stop: cleanups run last-in first-out
		proxies[i] = p
	}
	store := memory.New()
	w := faultStartWorkers(t, cfg, func(i int) redis.UniversalClient {
		return srv.Client(func(o *redis.Options) { *o = *faultRedisOptions(proxies[i].Addr()) })
	}, store)
	all := func(f func(p *netfault.Proxy)) {
		for _, p := range proxies {
			f(p)
		}
	}
	healthy := func() { time.Sleep(500 * time.Millisecond) }

	time.Sleep(800 * time.Millisecond)
	partitioned := 0
	for range cycles {
		all(func(p *netfault.Proxy) {
			p.SetLatency(netfault.Upstream, 40*time.Millisecond)
			p.SetLatency(netfault.Downstream, 40*time.Millisecond)
		})
		time.Sleep(700 * time.Millisecond)
		all(func(p *netfault.Proxy) {
			p.SetLatency(netfault.Upstream, 0)
			p.SetLatency(netfault.Downstream, 0)
		})
		healthy()

		if h := faultCurrentHolder(w, 30*time.Second); h >= 0 { // a ceiling: some holder holds it within a section
			proxies[h].Blackhole(netfault.Upstream, true)
			proxies[h].Blackhole(netfault.Downstream, true)
			time.Sleep(900 * time.Millisecond)
			proxies[h].Blackhole(netfault.Upstream, false)
			proxies[h].Blackhole(netfault.Downstream, false)
			partitioned++
		}
		healthy()

		all(func(p *netfault.Proxy) { p.Blackhole(netfault.Downstream, true) })
		time.Sleep(400 * time.Millisecond)
		all(func(p *netfault.Proxy) { p.Blackhole(netfault.Downstream, false) })
		healthy()

		all(func(p *netfault.Proxy) { p.DelayNext(netfault.Downstream, 400*time.Millisecond) })
		healthy()

		for range 3 {
			all((*netfault.Proxy).ResetAll)
			time.Sleep(150 * time.Millisecond)
		}
		healthy()

		all(func(p *netfault.Proxy) { p.RefuseNew(true); p.ResetAll() })
		time.Sleep(300 * time.Millisecond)
		all(func(p *netfault.Proxy) { p.RefuseNew(false) })
	}
	time.Sleep(800 * time.Millisecond)
	ops := w.stop(t)

	var st netfault.Stats
	for _, p := range proxies {
		s := p.Stats()
		st.Accepted += s.Accepted
		st.Refused += s.Refused
		for d := range 2 {
			st.Delayed[d] += s.Delayed[d]
			st.Dropped[d] += s.Dropped[d]
		}
	}
	r := faultRecord(t, faultCheck("network", ops, faultFinal(t, store, w.keys)))
	t.Logf("network: %d holders partitioned; proxies accepted %d connections (%d refused), delayed %d/%d and dropped %d/%d chunks up/down; %d calls ended with an unknown outcome",
		partitioned, st.Accepted, st.Refused, st.Delayed[0], st.Delayed[1], st.Dropped[0], st.Dropped[1], r.Unknown)
	if partitioned == 0 {
		t.Errorf("no holder was ever seen holding the lock to partition")
	}
	return r
}

// faultCurrentHolder waits, at most d, until some holder holds the lock,
// and returns it, or -1.
func faultCurrentHolder(w *faultWorkers, d time.Duration) int {
	h := int64(-1)
	testenv.Await(d, func() bool { h = w.holding.Load(); return h >= 0 })
	return int(h)
}
