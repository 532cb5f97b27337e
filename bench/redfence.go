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
// against the default in the same run.
func redfenceStrictSystem() system {
	s := redfenceVariant("redfence-strict", []reentrant.ClientOption{reentrant.WithStrictTokens()})
	s.openN = nil // Redlock has no strict mode
	s.linger, s.kept = 0, "one key: the name's counter, as the record of its last ownership (forever)"
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
		// With its default time tokens, a release stows the name: its
		// record (last token, owner) is a field of a record hash shared
		// by the names of its floor, which expires one to two
		// DefaultRecordExpiry after the release, and the floors (512 on
		// one server) live DefaultCounterIdleExpiry (7 days), too long
		// for the memory workload to wait: the row after the records
		// expired shows what the floors cost per name.
		linger:      2 * reentrant.DefaultRecordExpiry,
		idleExpiry:  0,
		idleTooLong: reentrant.DefaultCounterIdleExpiry,
		kept:        "the name's record, a field of a shared hash (1 to 2 min), and 512 shared floors (7 days)",
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
