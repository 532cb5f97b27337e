package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	mem = "Memory"
	// settle is how long to let Redis finish incremental rehashing and
	// shrink emptied tables (serverCron, 10 times a second) before reading
	// used_memory.
	settle = 500 * time.Millisecond
	// holders is how many goroutines take the memory workload's locks.
	holders = 16
)

// memory holds cfg.names locks on distinct names and reports used_memory
// per held lock, then releases them all and reports what each name still
// costs: at once, after state that lingers for a while has expired (when
// the system has such state and cfg.linger is set), and after the system's
// idle expiry of a name's state (when it has one). Client buffers
// (mem_clients_normal) are subtracted; the key tables' own growth is
// counted, since a lock pays for it.
func memory(ctx context.Context, e *env) ([]metric, error) {
	if e.multi() {
		return nil, nil
	}
	n := e.cfg.names
	restore, err := pauseLatencyTracking(ctx, e)
	if err != nil {
		return nil, err
	}
	defer restore()
	if err := e.admin.FlushAll(ctx).Err(); err != nil {
		return nil, err
	}
	m0, err := settledMem(ctx, e, 0)
	if err != nil {
		return nil, err
	}
	locks := make([]unlocker, n)
	if err := forEach(n, func(i int) (err error) {
		locks[i], err = e.lk.lock(ctx, "mem-"+strconv.Itoa(i))
		return err
	}); err != nil {
		return nil, err
	}
	m1, err := settledMem(ctx, e, 0)
	if err != nil {
		return nil, err
	}
	if err := forEach(n, func(i int) error { return locks[i].unlock(ctx) }); err != nil {
		return nil, err
	}
	m2, err := settledMem(ctx, e, 0)
	if err != nil {
		return nil, err
	}
	// Nothing is left by floor after a release: ratios to its zero would be
	// noise.
	left, err := keyTTLs(ctx, e)
	if err != nil {
		return nil, err
	}
	ms := []metric{
		num(mem, "per held lock", unitBytes, perItem(m0, m1, n)),
		noRatio(num(mem, "per name after release", unitBytes, perItem(m0, m2, n))),
		text(mem, "keys per name after release", fmt.Sprintf("%.2f", float64(m2.keys-m0.keys)/float64(n))),
		text(mem, "TTL of what a release leaves", left),
	}
	switch {
	case e.sys.linger == 0:
		ms = append(ms, text(mem, "per name after released state expired", "n/a (nothing lingers)"))
	case !e.cfg.linger:
		ms = append(ms, text(mem, "per name after released state expired", "not measured (-linger=false)"))
	default:
		// The lingering state expires linger after the lease's end, at
		// most a TTL after the release.
		m3, err := settledMem(ctx, e, e.cfg.ttl+e.sys.linger)
		if err != nil {
			return nil, err
		}
		ms = append(ms, noRatio(num(mem, "per name after released state expired", unitBytes, perItem(m0, m3, n))))
	}
	switch {
	case e.sys.idleExpiry > 0:
		m4, err := settledMem(ctx, e, e.sys.idleExpiry)
		if err != nil {
			return nil, err
		}
		ms = append(ms, noRatio(num(mem, "per name after idle expiry", unitBytes, perItem(m0, m4, n))))
	case e.sys.kept == "nothing":
		ms = append(ms, text(mem, "per name after idle expiry", "n/a (nothing kept)"))
	case e.sys.idleTooLong > 0:
		ms = append(ms, text(mem, "per name after idle expiry", fmt.Sprintf("n/a (expires after %v, too long to wait)", e.sys.idleTooLong)))
	default:
		ms = append(ms, text(mem, "per name after idle expiry", "n/a (never expires)"))
	}
	return ms, nil
}

// pauseLatencyTracking turns Redis 7's per-command latency histograms off
// until restore is called. Each is allocated on its command's first call
// after CONFIG RESETSTAT, which the other workloads send: left on, they add
// about 140 KB to used_memory during the measurement whatever the lock.
func pauseLatencyTracking(ctx context.Context, e *env) (restore func(), err error) {
	was, err := e.admin.ConfigGet(ctx, "latency-tracking").Result()
	if err != nil {
		return nil, err
	}
	if was["latency-tracking"] == "" { // before Redis 7: nothing to pause
		return func() {}, nil
	}
	if err := e.admin.ConfigSet(ctx, "latency-tracking", "no").Err(); err != nil {
		return nil, err
	}
	return func() {
		_ = e.admin.ConfigSet(context.WithoutCancel(ctx), "latency-tracking", was["latency-tracking"]).Err()
	}, nil
}

// settledMem waits wait, then until Redis's key count has stopped falling
// (keys past their TTL are reaped by the active expiry cycle), then settle,
// and reads INFO memory.
func settledMem(ctx context.Context, e *env, wait time.Duration) (memSnap, error) {
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return memSnap{}, ctx.Err()
		}
		last := int64(-1)
		for {
			n, err := e.admin.DBSize(ctx).Result()
			if err != nil {
				return memSnap{}, err
			}
			if n == last {
				break
			}
			last = n
			time.Sleep(time.Second)
		}
	}
	time.Sleep(settle)
	return readMem(ctx, e.admin)
}

// keyTTLs describes the expiry of every key on the server: "nothing" when
// there is none, else the shortest and longest PTTL, "never" for a key
// without one.
func keyTTLs(ctx context.Context, e *env) (string, error) {
	var keys []string
	iter := e.admin.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return "", err
	}
	if len(keys) == 0 {
		return "nothing", nil
	}
	cmds := make([]*redis.DurationCmd, len(keys))
	if _, err := e.admin.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.PTTL(ctx, k)
		}
		return nil
	}); err != nil {
		return "", err
	}
	short, long, never := time.Duration(-1), time.Duration(0), 0
	for _, c := range cmds {
		switch d := c.Val(); {
		case d < 0:
			never++
		default:
			if short < 0 || d < short {
				short = d
			}
			long = max(long, d)
		}
	}
	switch {
	case never == len(keys):
		return fmt.Sprintf("never (%d keys)", never), nil
	case never > 0:
		return fmt.Sprintf("%d keys never; the others %v to %v", never, short.Round(time.Second), long.Round(time.Second)), nil
	}
	return fmt.Sprintf("%v to %v (%d keys)", short.Round(time.Second), long.Round(time.Second), len(keys)), nil
}

// forEach runs f(0) … f(n-1) on a few goroutines and returns the first
// error.
func forEach(n int, f func(i int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs error
	)
	for g := range holders {
		wg.Go(func() {
			for i := g; i < n; i += holders {
				if err := f(i); err != nil {
					mu.Lock()
					if errs == nil {
						errs = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return errs
}
