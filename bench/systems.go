package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A locker is one lock implementation under test, bound to one go-redis
// client. lock waits until it holds name or ctx ends; an error with ctx
// ended means the wait was given up, any other error is a failure. Each
// implementation keeps its keys under its own prefix, so they can all share
// one server.
type locker interface {
	lock(ctx context.Context, name string) (unlocker, error)
	close() error
}

// An unlocker is one held lock.
type unlocker interface {
	unlock(ctx context.Context) error
}

// A system is one implementation and what the workloads need to know about
// it beyond the locker interface.
type system struct {
	name string
	open func(rdb *redis.Client, ttl time.Duration) (locker, error)
	// openN opens it on several independent masters (Redlock), with -nodes
	// above 1; nil for a system that runs on one node only, which is then
	// left out, but for floor, which stays on the first node as the
	// baseline.
	openN func(rdbs []*redis.Client, ttl time.Duration) (locker, error)
	// linger is how long per-name state left by a release stays after the
	// end of the lease it was taken with before Redis expires it; 0 when a
	// release leaves nothing that expires later.
	linger time.Duration
	// idleExpiry is how long per-name state that outlives every release
	// (redfence's fencing counter) stays once the name is idle; 0 when it
	// never expires or there is none. The memory workload waits this long
	// and measures again when it is set.
	idleExpiry time.Duration
	// idleTooLong is, when idleExpiry is 0, how long state a release
	// leaves lives when that is too long for the workload to wait (0: it
	// never expires).
	idleTooLong time.Duration
	// kept describes the per-name state a release leaves, for the report.
	kept string
}

// systems lists every implementation in report order; floor comes first
// because every ratio is to it.
func systems() []system {
	return []system{floorSystem(), fencedSystem(false), fencedSystem(true), redislockSystem(), redsyncSystem(), redfenceSystem(), redfenceStrictSystem()}
}

// pick returns the systems named in csv, in report order; floor is always
// included because every ratio is to it.
func pick(all []system, csv string) ([]system, error) {
	want := map[string]bool{"floor": true}
	for _, n := range strings.Split(csv, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	var out []system
	for _, s := range all {
		if want[s.name] {
			out = append(out, s)
			delete(want, s.name)
		}
	}
	for n := range want {
		return nil, fmt.Errorf("unknown system %q", n)
	}
	return out, nil
}

// newClient returns a go-redis client for addr with a pool large enough that
// the 32 goroutines of W2 never queue for a connection, counting every
// command it sends in n.
func newClient(addr string, n *atomic.Int64) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	if n != nil {
		rdb.AddHook(requestCounter{n})
	}
	return rdb
}

// requestCounter counts the commands a client sends: its round trips, as
// opposed to the commands Redis runs, which include those inside scripts.
// A script run whose EVALSHA fails with NOSCRIPT counts twice, as it costs.
// Pub/sub commands (redfence's SUBSCRIBE) do not pass through hooks.
type requestCounter struct{ n *atomic.Int64 }

var _ redis.Hook = requestCounter{}

func (requestCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h requestCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h requestCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// sleepCtx sleeps for d or until ctx ends, and reports whether it slept the
// whole time.
func sleepCtx(ctx context.Context, t *time.Timer, d time.Duration) bool {
	t.Reset(d)
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		t.Stop()
		return false
	}
}
