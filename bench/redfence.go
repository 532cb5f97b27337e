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

func redfenceSystem() system { return redfenceVariant("redfence", nil) }

// redfenceStrictSystem is redfence with WithStrictTokens: the opt-in
// counter per name, for the script time and memory it saves or costs
// against the default in the same run. It has a prefix of its own: the
// clients of one prefix share a token mode.
func redfenceStrictSystem() system {
	s := redfenceVariant("redfence-strict", []reentrant.ClientOption{reentrant.WithStrictTokens(),
		reentrant.WithPrefix("redfence-strict")})
	s.openN = nil // Redlock has no strict mode
	s.linger, s.kept = 0, "one key: the name's counter (forever)"
	return s
}

// redfenceVariant is redfence with opts besides the TTL.
func redfenceVariant(name string, opts []reentrant.ClientOption) system {
	return system{
		name: name,
		open: func(rdb *redis.Client, ttl time.Duration) (locker, error) {
			c, err := reentrant.New(rdb, append([]reentrant.ClientOption{reentrant.WithTTL(ttl)}, opts...)...)
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
		// With its default time tokens, a release deletes the hold and
		// leaves the name nothing of its own; the floors (at most one per
		// hash slot) live 7 days after their last write, too long for the
		// memory workload to wait.
		linger:      0,
		idleExpiry:  0,
		idleTooLong: 7 * 24 * time.Hour,
		kept:        "one floor per hash slot (7 days), shared by the slot's names",
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
