package main

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

const (
	w2 = "W2 parallel, own keys"
	// parallelism is W2's goroutine count, each on its own key.
	parallelism = 32
)

// parallel (W2) is 32 goroutines, each taking and releasing its own key
// for cfg.duration: throughput when nothing contends, and the cost of a
// pair with a busy server and client.
func parallel(ctx context.Context, e *env) ([]metric, error) {
	for g := range parallelism { // warm the pool's connections
		if err := pair(ctx, e.lk, "w2-"+strconv.Itoa(g)); err != nil {
			return nil, err
		}
	}
	w, err := begin(ctx, e)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(e.cfg.duration)
	var (
		pairs atomic.Int64
		wg    sync.WaitGroup
		errs  = make([]error, parallelism)
	)
	for g := range parallelism {
		wg.Go(func() {
			name := "w2-" + strconv.Itoa(g)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if errs[g] = pair(ctx, e.lk, name); errs[g] != nil {
					return
				}
				pairs.Add(1)
			}
		})
	}
	wg.Wait()
	we, err := w.end(ctx)
	if err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	n := int(pairs.Load())
	return append([]metric{
		num(w2, "pairs/s", unitRate, float64(n)/we.elapsed.Seconds()),
	}, we.costs(w2, "pair", n)...), nil
}
