package main

import (
	"context"
	"math"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// redsyncLocker is github.com/go-redsync/redsync/v4 on one Redis through
// its go-redis v9 pool, retrying every 2 ms with enough tries to wait until
// ctx ends. A Mutex is not safe for concurrent use, so each lock call makes
// its own, as redsync's examples do.
type redsyncLocker struct {
	rs   *redsync.Redsync
	opts []redsync.Option
}

var _ locker = (*redsyncLocker)(nil)

func redsyncSystem() system {
	return system{
		name: "redsync",
		open: func(rdb *redis.Client, ttl time.Duration) (locker, error) {
			return &redsyncLocker{rs: redsync.New(goredis.NewPool(rdb)), opts: []redsync.Option{
				redsync.WithExpiry(ttl),
				redsync.WithTries(math.MaxInt32),
				redsync.WithRetryDelay(floorPoll),
			}}, nil
		},
		openN: func(rdbs []*redis.Client, ttl time.Duration) (locker, error) {
			pools := make([]redsyncredis.Pool, len(rdbs))
			for i, rdb := range rdbs {
				pools[i] = goredis.NewPool(rdb)
			}
			return &redsyncLocker{rs: redsync.New(pools...), opts: []redsync.Option{
				redsync.WithExpiry(ttl),
				redsync.WithTries(math.MaxInt32),
				redsync.WithRetryDelay(floorPoll),
			}}, nil
		},
		kept: "nothing",
	}
}

func (r *redsyncLocker) lock(ctx context.Context, name string) (unlocker, error) {
	m := r.rs.NewMutex("redsync:"+name, r.opts...)
	if err := m.LockContext(ctx); err != nil {
		return nil, err // redsync.ErrFailed when ctx ended
	}
	return redsyncLock{m}, nil
}

func (r *redsyncLocker) close() error { return nil }

type redsyncLock struct{ m *redsync.Mutex }

func (l redsyncLock) unlock(ctx context.Context) error {
	ok, err := l.m.UnlockContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errNotHeld
	}
	return nil
}
