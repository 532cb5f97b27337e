package main

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// config holds the settings every workload reads; the flags fill it.
type config struct {
	rounds   int
	pairs    int           // W1 iterations
	duration time.Duration // W2 and W3
	check    time.Duration // the mutual-exclusion check's W3 run
	ttl      time.Duration // every system's lease
	names    int           // the memory workload's locks
	leases   int           // the renewal workload's leases
	renewTTL time.Duration // the renewal workload's lease
	linger   bool          // measure memory again once released state expired (waits its lifetime)
	// sharedDur is the length of each measured run of rw64 and sem8
	// (rw64 runs twice: the RWMutex, then the plain-Lock baseline).
	sharedDur time.Duration
}

// env is what a workload run gets: one system, its go-redis client and the
// counter of the commands that client sent, and the admin client that
// reads and resets the server's statistics. With -nodes above 1, rdbs and
// admins hold one client per node (rdb and admin are the first node's),
// and the server figures are summed over the nodes.
type env struct {
	cfg    config
	sys    system
	lk     locker
	rdb    *redis.Client
	rdbs   []*redis.Client
	reqs   *atomic.Int64
	admin  *redis.Client
	admins []*redis.Client
}

// multi reports a run on several nodes (Redlock), where the memory and
// renewal workloads are not run.
func (e *env) multi() bool { return len(e.admins) > 1 }

// A workload measures one thing on one system per call. run may skip a
// system by returning no metrics.
type workload struct {
	name string // its flag name
	run  func(ctx context.Context, e *env) ([]metric, error)
}

func workloads() []workload {
	return []workload{
		{"w1", uncontended},
		{"w1m", lockMulti},
		{"w1s", split},
		{"w2", parallel},
		{"w3", contended},
		{"mem", memory},
		{"renew", renewal},
		{"rw64", rw64},
		{"sem8", sem8},
	}
}

// window is one measured stretch: the server's statistics, this process's
// CPU and the system's client requests at its start.
type window struct {
	e    *env
	snap serverSnap
	cpu  time.Duration
	reqs int64
	t    time.Time
}

// begin empties the server and resets its statistics, collects garbage so
// that an earlier run's garbage is not charged to this one, and starts the
// clocks.
func begin(ctx context.Context, e *env) (*window, error) {
	if err := flushAll(ctx, e.admins); err != nil {
		return nil, err
	}
	runtime.GC()
	snap, err := resetStats(ctx, e.admins...)
	if err != nil {
		return nil, err
	}
	return &window{e: e, snap: snap, cpu: processCPU(), reqs: e.reqs.Load(), t: time.Now()}, nil
}

// flushAll empties the servers of admins. With several (a Redlock), each
// is then given a join record from long ago: a flushed node is, to
// redfence's Redlock, one that lost its data, which votes for nobody for a
// TTL; these have granted nothing a later run needs, which an operator may
// tell it so by setting its join record, "redfence:j" under the default
// prefix, to 1 (docs/redlock.md). Other systems never read the key.
func flushAll(ctx context.Context, admins []*redis.Client) error {
	for _, a := range admins {
		if err := a.FlushAll(ctx).Err(); err != nil {
			return err
		}
		if len(admins) > 1 {
			if err := a.Set(ctx, "redfence:j", "1", 0).Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// windowEnd is what happened during a window.
type windowEnd struct {
	server  serverDelta
	cpu     time.Duration // this process: the system's client
	reqs    int64
	elapsed time.Duration
}

func (w *window) end(ctx context.Context) (windowEnd, error) {
	elapsed, cpu, reqs := time.Since(w.t), processCPU()-w.cpu, w.e.reqs.Load()-w.reqs
	after, err := readStats(ctx, w.e.admins...)
	if err != nil {
		return windowEnd{}, err
	}
	return windowEnd{server: delta(w.snap, after), cpu: cpu, reqs: reqs, elapsed: elapsed}, nil
}

// costs returns the per-operation cost metrics of a window with ops
// operations ("pair" or "acquisition").
func (we windowEnd) costs(group, per string, ops int) []metric {
	n := float64(max(ops, 1))
	return []metric{
		num(group, "server commands per "+per, unitCount, float64(we.server.total)/n),
		num(group, "server CPU per "+per, unitDur, we.server.cpu*1e9/n),
		num(group, "script time per "+per, unitDur, we.server.script*1e9/n),
		num(group, "client requests per "+per, unitCount, float64(we.reqs)/n),
		num(group, "client CPU per "+per, unitDur, float64(we.cpu)/n),
		{group: group, name: "per " + per, text: we.server.breakdown(ops), detail: true},
	}
}

// pair takes and releases name once.
func pair(ctx context.Context, lk locker, name string) error {
	u, err := lk.lock(ctx, name)
	if err != nil {
		return fmt.Errorf("lock %q: %w", name, err)
	}
	if err := u.unlock(ctx); err != nil {
		return fmt.Errorf("unlock %q: %w", name, err)
	}
	return nil
}
