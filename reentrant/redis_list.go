package reentrant

// The Redis backends' side of List: SCAN for lock hashes on every server
// that holds locks.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/scripts"
)

// listScanCount is the COUNT hint of each SCAN a walk sends.
const listScanCount = 512

// scanLocks SCANs each of nodes in turn (each server of it: see
// primaries) for the lock hashes under prefix and calls page with the
// names of each page of them, until page returns false. Each SCAN is
// bounded by ctx. A node whose walk fails is passed over while at most
// tolerate have; past that, or when ctx ends or the client closes, it
// stops and returns the errors.
func scanLocks(c *Client, ctx context.Context, nodes []redis.UniversalClient, prefix string, tolerate int, page func(names []string) bool) error {
	var errs []error
	for i, node := range nodes {
		err := scanNode(c, ctx, node, prefix, page)
		switch {
		case errors.Is(err, errStopped):
			return nil
		case err == nil:
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrClosed):
			return err
		}
		if errs = append(errs, fmt.Errorf("node %d: %w", i, err)); len(errs) > tolerate {
			return join(errs...)
		}
	}
	return nil
}

// errStopped ends a walk whose page returned false.
var errStopped = errors.New("stopped")

// scanNode SCANs every server of node (a Cluster's masters, a Ring's
// shards, or node itself).
func scanNode(c *Client, ctx context.Context, node redis.UniversalClient, prefix string, page func(names []string) bool) error {
	servers := bounded(c, ctx, cleanupBudget/2, func(ctx context.Context) ([]redis.UniversalClient, error) {
		return primaries(ctx, node)
	}, nil)
	if servers.err != nil {
		return servers.err
	}
	pattern := scripts.LockPattern(prefix)
	for _, rdb := range servers.v {
		var cursor uint64
		for {
			if c.isClosed() {
				return ErrClosed
			}
			type scanned struct {
				keys []string
				next uint64
			}
			out := bounded(c, ctx, cleanupBudget/2, func(ctx context.Context) (scanned, error) {
				keys, next, err := rdb.Scan(ctx, cursor, pattern, listScanCount).Result()
				return scanned{keys, next}, err
			}, nil)
			if out.err != nil {
				return out.err
			}
			var names []string
			for _, k := range out.v.keys {
				if name, ok := scripts.NameOf(prefix, k); ok {
					names = append(names, name)
				}
			}
			if len(names) > 0 && !page(names) {
				return errStopped
			}
			if cursor = out.v.next; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// scan walks every primary of the deployment: a Cluster's masters, a
// Ring's shards, or the one server.
func (s *single) scan(ctx context.Context, page func(names []string) bool) error {
	return scanLocks(s.c, ctx, []redis.UniversalClient{s.rdb}, s.space.prefix, 0, page)
}

// scan walks every node; a lock held on a majority is on at least one of
// every majority of them, so a minority may fail.
func (q *quorum) scan(ctx context.Context, page func(names []string) bool) error {
	return scanLocks(q.c, ctx, q.nodes, q.space.prefix, len(q.nodes)-q.majority(), page)
}

// primaries returns the servers that hold rdb's keys: a Cluster's masters,
// a Ring's shards, or rdb itself.
func primaries(ctx context.Context, rdb redis.UniversalClient) ([]redis.UniversalClient, error) {
	var mu sync.Mutex
	var out []redis.UniversalClient
	add := func(_ context.Context, node *redis.Client) error {
		mu.Lock()
		out = append(out, node)
		mu.Unlock()
		return nil
	}
	var err error
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		err = r.ForEachMaster(ctx, add)
	case *redis.Ring:
		err = r.ForEachShard(ctx, add)
	default:
		return []redis.UniversalClient{rdb}, nil
	}
	if err == nil && len(out) == 0 {
		err = errors.New("no primary to scan")
	}
	return out, err
}
