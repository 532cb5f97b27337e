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
	for range 50 { // connections, scripts, redfence's one-time policy check
		if err := pair(ctx, e.lk, name); err != nil {
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
		if err := pair(ctx, e.lk, name); err != nil {
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
		num(w1, "pair latency p50", unitDur, float64(percentile(lat, 0.50))),
		num(w1, "pair latency p99", unitDur, float64(percentile(lat, 0.99))),
	}, we.costs(w1, "pair", len(lat))...), nil
}
