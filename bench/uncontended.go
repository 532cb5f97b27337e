package main

import (
	"context"
	"slices"
	"time"
)

const w1 = "W1 uncontended"

// uncontended (W1) is one goroutine taking and releasing one free lock
// cfg.pairs times: the latency of the pair and what it costs the client and
// the server.
func uncontended(ctx context.Context, e *env) ([]metric, error) {
	const name = "w1"
	return timedPairs(ctx, e, w1, func(ctx context.Context) error { return pair(ctx, e.lk, name) })
}

// timedPairs runs f 50 times to warm up (connections, scripts, redfence's
// one-time policy check), then cfg.pairs times in a window of its own, and
// reports the pair's latency (p50, then p99) and costs under group.
func timedPairs(ctx context.Context, e *env, group string, f func(context.Context) error) ([]metric, error) {
	for range 50 {
		if err := f(ctx); err != nil {
			return nil, err
		}
	}
	w, err := begin(ctx, e)
	if err != nil {
		return nil, err
	}
	lat := make([]time.Duration, 0, e.cfg.pairs)
	for range e.cfg.pairs {
		t := time.Now()
		if err := f(ctx); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t))
	}
	we, err := w.end(ctx)
	if err != nil {
		return nil, err
	}
	slices.Sort(lat)
	return append([]metric{
		num(group, "pair latency p50", unitDur, float64(percentile(lat, 0.50))),
		num(group, "pair latency p99", unitDur, float64(percentile(lat, 0.99))),
	}, we.costs(group, "pair", len(lat))...), nil
}
