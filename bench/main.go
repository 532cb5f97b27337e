// Command bench compares redfence's lock with a hand-written floor and two
// popular Redis locks, github.com/bsm/redislock and
// github.com/go-redsync/redsync/v4, on one redis-server it starts itself.
//
// Every round runs every workload on every system, the systems in an order
// rotated each round, so that slow drift on a noisy machine hits them all
// alike. The report gives each figure's median over the rounds, its spread
// (min–max) and the median of its per-round ratios to the floor. What each
// workload measures is in docs/benchmarks.md.
//
// It lives in its own module so that the library's users never download
// the peers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() { os.Exit(bench()) }

// bench runs the benchmark and returns the exit code: 0, 1 when a run
// failed (a lock broke mutual exclusion, Redis failed), 2 for bad flags or
// no server. It returns rather than exits so that the server it started is
// always stopped.
func bench() int {
	cfg := config{}
	flag.IntVar(&cfg.rounds, "rounds", 3, "rounds: each runs every workload on every system")
	flag.IntVar(&cfg.pairs, "pairs", 5000, "W1: acquire+release pairs per run")
	flag.DurationVar(&cfg.duration, "duration", 3*time.Second, "W2, W3: length of each run")
	flag.DurationVar(&cfg.check, "check", time.Second, "length of the mutual-exclusion check (W3) of each system before measuring")
	flag.DurationVar(&cfg.ttl, "ttl", 10*time.Second, "every system's lease in W1, W2, W3 and the memory workload")
	flag.IntVar(&cfg.names, "names", 10000, "memory: locks held at once, and names released")
	flag.IntVar(&cfg.leases, "leases", 10000, "renewal: leases held at once")
	flag.DurationVar(&cfg.renewTTL, "renew-ttl", 2*time.Second, "renewal: the lease, renewed every third of it")
	flag.DurationVar(&cfg.sharedDur, "shared-duration", 10*time.Second, "rw64, sem8: length of each measured run (rw64 runs two: RWMutex, then the plain-Lock baseline)")
	flag.BoolVar(&cfg.linger, "linger", true, "memory: wait until released state that expires later has expired, for systems that have such state, and measure again")
	wl := flag.String("workloads", "w1,w1m,w1s,w2,w3,mem,renew", "workloads to run, comma-separated; rw64 and sem8 (redfence only) run only when named")
	sl := flag.String("systems", "floor,fenced-multi,fenced-lua,redislock,redsync,redfence,redfence-strict", "systems to run, comma-separated; floor always runs")
	nodes := flag.Int("nodes", 1, "independent masters to start (1, or an odd number from 3): above 1, redfence runs as a Redlock (NewRedlock) and redsync on every node, floor stays on the first node as the baseline, redislock, memory and renewal are left out")
	addr := flag.String("addr", "", "use the redis-server at this address instead of starting one; it must be empty and it will be FLUSHALLed, so give only a server you own")
	bin := flag.String("redis-server", "", "the redis-server to start (default $"+serverVar+", else redis-server from PATH)")
	flag.Parse()

	if err := cfg.validate(); err != nil {
		return usage(err)
	}
	switch {
	case *nodes != 1 && (*nodes < 3 || *nodes%2 == 0):
		return usage(fmt.Errorf("-nodes %d: 1, or an odd number from 3", *nodes))
	case *nodes != 1 && *addr != "":
		return usage(errors.New("-nodes starts its own servers; give it without -addr"))
	}
	sys, err := pick(systems(), *sl)
	if err != nil {
		return usage(err)
	}
	wls, err := pickWorkloads(*wl)
	if err != nil {
		return usage(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	addrs := []string{*addr}
	if *addr == "" {
		path, err := serverBinary(*bin)
		if err != nil {
			return usage(err)
		}
		addrs = addrs[:0]
		for range *nodes {
			s, err := startServer(path)
			if err != nil {
				return usage(err)
			}
			defer s.stop()
			addrs = append(addrs, s.addr)
			fmt.Fprintf(os.Stderr, "bench: started %s on %s (pid %d)\n", path, s.addr, s.cmd.Process.Pid)
		}
	}
	if err := run(ctx, cfg, addrs, sys, wls, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench: FAIL:", err)
		return 1
	}
	return 0
}

func usage(err error) int {
	fmt.Fprintln(os.Stderr, "bench:", err)
	return 2
}

func (c config) validate() error {
	switch {
	case c.rounds < 1:
		return errors.New("-rounds must be at least 1")
	case c.pairs < 1, c.names < 1, c.leases < 1:
		return errors.New("-pairs, -names and -leases must be at least 1")
	case c.duration <= 0, c.check <= 0, c.sharedDur <= 0:
		return errors.New("-duration, -check and -shared-duration must be positive")
	case c.ttl < 100*time.Millisecond, c.renewTTL < 100*time.Millisecond:
		return errors.New("-ttl and -renew-ttl must be at least 100ms")
	case c.ttl%time.Millisecond != 0, c.renewTTL%time.Millisecond != 0:
		return errors.New("-ttl and -renew-ttl must be whole milliseconds")
	}
	return nil
}

func pickWorkloads(csv string) ([]workload, error) {
	want := map[string]bool{}
	for _, n := range strings.Split(csv, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	var out []workload
	for _, w := range workloads() {
		if want[w.name] {
			out = append(out, w)
			delete(want, w.name)
		}
	}
	for n := range want {
		return nil, fmt.Errorf("unknown workload %q", n)
	}
	if len(out) == 0 {
		return nil, errors.New("no workload selected")
	}
	return out, nil
}

// run checks every system's mutual exclusion, then runs cfg.rounds rounds
// of every workload on every system against the empty servers at addrs
// (one, or a Redlock's nodes), and writes the report to out; progress goes
// to logw.
func run(ctx context.Context, cfg config, addrs []string, all []system, wls []workload, out, logw io.Writer) error {
	admins := make([]*redis.Client, len(addrs))
	for i, addr := range addrs {
		admins[i] = redis.NewClient(&redis.Options{Addr: addr})
		defer admins[i].Close()
		if n, err := admins[i].DBSize(ctx).Result(); err != nil {
			return err
		} else if n != 0 {
			return fmt.Errorf("the server at %s holds %d keys; the benchmark empties its server with FLUSHALL, so it runs only on an empty one", addr, n)
		}
	}
	admin := admins[0]
	var sys []system
	var envs []*env
	for _, s := range all {
		reqs := new(atomic.Int64)
		rdbs := make([]*redis.Client, len(addrs))
		for i, addr := range addrs {
			rdbs[i] = newClient(addr, reqs)
			defer rdbs[i].Close()
		}
		var lk locker
		var err error
		switch {
		case len(addrs) == 1 || s.name == "floor":
			lk, err = s.open(rdbs[0], cfg.ttl)
		case s.openN != nil:
			lk, err = s.openN(rdbs, cfg.ttl)
		default:
			fmt.Fprintf(logw, "bench: %s runs on one node only: left out\n", s.name)
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		defer lk.close()
		sys = append(sys, s)
		envs = append(envs, &env{cfg: cfg, sys: s, lk: lk, rdb: rdbs[0], rdbs: rdbs, reqs: reqs, admin: admin, admins: admins})
	}
	for _, e := range envs {
		if err := flushAll(ctx, admins); err != nil {
			return err
		}
		if err := checkExclusion(ctx, e.lk, "exclusion", cfg.check); err != nil {
			return fmt.Errorf("%s: %w", e.sys.name, err)
		}
		fmt.Fprintf(logw, "bench: %s keeps mutual exclusion (%d goroutines, %v)\n", e.sys.name, contenders, cfg.check)
	}
	names := make([]string, len(sys))
	for i, s := range sys {
		names[i] = s.name
	}
	rep := newReport(names)
	for round := range cfg.rounds {
		for _, w := range wls {
			for i := range envs {
				e := envs[(i+round)%len(envs)] // a rotated order: no system is always first
				t := time.Now()
				ms, err := w.run(ctx, e)
				if err != nil {
					return fmt.Errorf("round %d, %s, %s: %w", round+1, w.name, e.sys.name, err)
				}
				rep.add(round, e.sys.name, ms)
				if len(ms) > 0 {
					fmt.Fprintf(logw, "bench: round %d/%d %s %s (%v)\n", round+1, cfg.rounds, w.name, e.sys.name, time.Since(t).Round(time.Millisecond))
				}
			}
		}
	}
	for _, a := range admins {
		if err := a.FlushAll(ctx).Err(); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "# redfence peer benchmark")
	if len(addrs) > 1 {
		fmt.Fprintf(out, "\nRedlock on %d independent masters: redfence is reentrant.NewRedlock and redsync uses every node; floor runs on the first node only, the one-node baseline. Server figures are summed over the nodes.\n", len(addrs))
	}
	fmt.Fprintln(out)
	for _, l := range machine(ctx, admin, len(addrs)) {
		fmt.Fprintln(out, "- "+l)
	}
	fmt.Fprintf(out, "- settings: rounds %d; TTL %v; W1 %d pairs; W2 %d goroutines, W3 %d goroutines holding %v, %v each; "+
		"memory %d names; renewal %d leases, TTL %v, held %d TTLs\n",
		cfg.rounds, cfg.ttl, cfg.pairs, parallelism, contenders, holdFor, cfg.duration, cfg.names, cfg.leases, cfg.renewTTL, renewTTLs)
	for _, w := range wls {
		if w.name == "rw64" || w.name == "sem8" {
			fmt.Fprintf(out, "- rw64, sem8 (redfence only, plain contexts: a fresh owner per call): rw64 %d readers on %d clients holding %v, "+
				"1 writer on its own client holding %v every %v, on one RWMutex, then all on one Lock; sem8 %d goroutines on %d clients holding %v, "+
				"one Semaphore of %d; %v each, after an unmeasured %v\n",
				rwReaders, rwProcs, rwReadFor, rwWriteFor, rwPause, semWorkers, semProcs, semHoldFor, semPermits, cfg.sharedDur, warmFor(cfg.sharedDur))
			break
		}
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Each cell: median over the rounds (min–max), then ×ratio: the median of the per-round ratios to floor's figure in the same round.")
	fmt.Fprintln(out)
	rep.write(out)
	return nil
}
