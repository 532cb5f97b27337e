package main

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// demoRedlock starts three embedded servers for the demo's --redlock, and
// returns a client of each and the function that stops them all.
func demoRedlock(ctx context.Context) ([]redis.UniversalClient, func(), error) {
	var nodes []redis.UniversalClient
	var stops []func()
	stop := func() {
		for _, s := range stops {
			s()
		}
	}
	for range 3 {
		rdb, _, s, err := demoRedis(ctx, "")
		if err != nil {
			stop()
			return nil, nil, err
		}
		nodes, stops = append(nodes, rdb), append(stops, s)
	}
	return nodes, stop, nil
}
