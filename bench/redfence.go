package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/reentrant"
)

// redfenceLocker is reentrant.Client with its default options except the
// TTL: notified waiting, renewal at TTL/3, a fresh owner per lock call.
type redfenceLocker struct{ c *reentrant.Client }

var _ locker = (*redfenceLocker)(nil)

func redfenceSystem() system {
	return system{
		name: "redfence",
		open: func(rdb *redis.Client, ttl time.Duration) (locker, error) {
			c, err := reentrant.New(rdb, reentrant.WithTTL(ttl))
			if err != nil {
				return nil, err
			}
			return &redfenceLocker{c}, nil
		},
		openN: func(rdbs []*redis.Client, ttl time.Duration) (locker, error) {
			nodes := make([]redis.UniversalClient, len(rdbs))
			for i, rdb := range rdbs {
				nodes[i] = rdb
			}
			c, err := reentrant.NewRedlock(nodes, reentrant.WithTTL(ttl))
			if err != nil {
				return nil, err
			}
			return &redfenceLocker{c}, nil
		},
		// With its default strict counter, reentrant keeps each name's
		// hash (the fencing counter and the last owner) forever. With
		// WithTimeTokens it expires after WithCounterIdleExpiry (at least
		// an hour, 7 days by default), too long for the memory workload to
		// wait, so idleExpiry stays 0 and the row says "never expires" of
		// the default. Nothing else lingers after a release.
		idleExpiry: 0,
		kept:       "one hash: fencing counter and last owner (forever)",
	}
}

func (r *redfenceLocker) lock(ctx context.Context, name string) (unlocker, error) {
	l, err := r.c.Lock(ctx, name)
	if err != nil {
		return nil, err
	}
	return redfenceLease{l}, nil
}

func (r *redfenceLocker) close() error { return r.c.Close() }

type redfenceLease struct{ l *reentrant.Lease }

func (l redfenceLease) unlock(ctx context.Context) error { return l.l.Unlock(ctx) }
