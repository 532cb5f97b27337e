package main

import (
	"context"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// redislockLocker is github.com/bsm/redislock as its README uses it, with
// a linear 2 ms retry so that it waits, polling, until ctx ends.
type redislockLocker struct {
	c   *redislock.Client
	ttl time.Duration
	opt *redislock.Options
}

var _ locker = (*redislockLocker)(nil)

func redislockSystem() system {
	return system{
		name: "redislock",
		open: func(rdb *redis.Client, ttl time.Duration) (locker, error) {
			return &redislockLocker{c: redislock.New(rdb), ttl: ttl,
				opt: &redislock.Options{RetryStrategy: redislock.LinearBackoff(floorPoll)}}, nil
		},
		kept: "nothing",
	}
}

func (r *redislockLocker) lock(ctx context.Context, name string) (unlocker, error) {
	// Without a deadline Obtain gives up after one TTL; every workload's
	// context has one.
	l, err := r.c.Obtain(ctx, "redislock:"+name, r.ttl, r.opt)
	if err != nil {
		return nil, err
	}
	return redislockLock{l}, nil
}

func (r *redislockLocker) close() error { return nil }

type redislockLock struct{ l *redislock.Lock }

func (l redislockLock) unlock(ctx context.Context) error { return l.l.Release(ctx) }
