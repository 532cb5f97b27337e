package reentrant

// The Redis backends' side of List: SCAN for lock hashes on every server
// that holds locks.

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
func scanLocks(c *Client, ctx context.Context, nodes []redis.UniversalClient, prefix string, shared bool, tolerate int, page func(names []listed) bool) error {
	var errs []error
	for i, node := range nodes {
		err := scanNode(c, ctx, node, prefix, shared, page)
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
func scanNode(c *Client, ctx context.Context, node redis.UniversalClient, prefix string, shared bool, page func(names []listed) bool) error {
	servers := bounded(c, ctx, cleanupBudget/2, func(ctx context.Context) ([]redis.UniversalClient, error) {
		return primaries(ctx, node)
	}, nil)
	if servers.err != nil {
		return servers.err
	}
	pattern, kinds := scripts.LockPattern(prefix), []listKind{{0, prefix, ""}}
	if shared {
		// One pass over every key under the prefix: a read-write lock is
		// held when its writer hash or its readers' set exists, a
		// semaphore when its permits' hash does.
		rw, sem := prefix+scripts.RWPrefix, prefix+scripts.SemPrefix
		pattern = scripts.PrefixPattern(prefix)
		kinds = append(kinds, listKind{'w', rw, ""}, listKind{'w', rw, ":r"}, listKind{'s', sem, ":h"})
	}
	for _, rdb := range servers.v {
		if err := scanServer(c, ctx, rdb, pattern, kinds, page); err != nil {
			return err
		}
	}
	return nil
}

// listKind is a key a walk lists: the key of a name under prefix with
// suffix added, of the lock kind kind.
type listKind struct {
	kind           byte
	prefix, suffix string
}

// scanServer SCANs one server for pattern, and pages the names of the
// keys of kinds.
func scanServer(c *Client, ctx context.Context, rdb redis.UniversalClient, pattern string, kinds []listKind, page func(names []listed) bool) error {
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
		var names []listed
		for _, key := range out.v.keys {
			for _, k := range kinds {
				if key, ok := strings.CutSuffix(key, k.suffix); ok {
					if name, ok := scripts.NameOf(k.prefix, key); ok {
						names = append(names, listed{name, k.kind})
						break
					}
				}
			}
		}
		if len(names) > 0 && !page(names) {
			return errStopped
		}
		if cursor = out.v.next; cursor == 0 {
			return nil
		}
	}
}

// scan walks every primary of the deployment: a Cluster's masters, a
// Ring's shards, or the one server.
func (s *single) scan(ctx context.Context, page func(names []listed) bool) error {
	return scanLocks(s.c, ctx, []redis.UniversalClient{s.rdb}, s.space.prefix, true, 0, page)
}

// scan walks every node; a lock held on a majority is on at least one of
// every majority of them, so a minority may fail.
func (q *quorum) scan(ctx context.Context, page func(names []listed) bool) error {
	return scanLocks(q.c, ctx, q.nodes, q.space.prefix, false, len(q.nodes)-q.majority(), page)
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
