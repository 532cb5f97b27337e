package main

import (
	"context"
	crand "crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// floorPoll is how often a contended floor lock, redislock and redsync try
// again.
const floorPoll = 2 * time.Millisecond

//go:embed floor_release.lua
var floorReleaseSrc string

var floorRelease = redis.NewScript(floorReleaseSrc)

// floor is the least a correct single-instance Redis lock can do: SET key
// value NX PX ttl to acquire, polling every 2 ms while the key exists, and a
// compare-and-delete script to release. No token, no reentry, no renewal,
// no key validation. Every ratio in the report is to it.
type floor struct {
	rdb    *redis.Client
	ttlMS  int64
	prefix string // random per client, so values never repeat across processes
	seq    atomic.Uint64
}

var _ locker = (*floor)(nil)

func floorSystem() system {
	return system{
		name: "floor",
		open: func(rdb *redis.Client, ttl time.Duration) (locker, error) {
			var b [8]byte
			_, _ = crand.Read(b[:])
			return &floor{rdb: rdb, ttlMS: ttl.Milliseconds(), prefix: hex.EncodeToString(b[:]) + ":"}, nil
		},
		kept: "nothing",
	}
}

func (f *floor) lock(ctx context.Context, name string) (unlocker, error) {
	key := "floor:" + name
	// Unique per acquisition without a crypto/rand read each time: the
	// floor should cost no more than correctness needs.
	val := f.prefix + strconv.FormatUint(f.seq.Add(1), 36)
	t := time.NewTimer(floorPoll)
	defer t.Stop()
	for {
		err := f.rdb.Do(ctx, "set", key, val, "nx", "px", f.ttlMS).Err()
		switch {
		case err == nil:
			return &floorLock{f: f, key: key, val: val}, nil
		case !errors.Is(err, redis.Nil):
			return nil, err
		}
		if !sleepCtx(ctx, t, floorPoll) {
			return nil, ctx.Err()
		}
	}
}

func (f *floor) close() error { return nil }

type floorLock struct {
	f        *floor
	key, val string
}

var errNotHeld = errors.New("bench: lock not held at release")

func (l *floorLock) unlock(ctx context.Context) error {
	n, err := floorRelease.Run(ctx, l.f.rdb, []string{l.key}, l.val).Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return errNotHeld
	}
	return nil
}
