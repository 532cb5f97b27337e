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

//go:embed fenced_acquire.lua
var fencedAcquireSrc string

var fencedAcquire = redis.NewScript(fencedAcquireSrc)

// fenced is the least a lock that hands out fencing tokens can do on one
// Redis while keeping shared/DESIGN.md's token rule: the counter lives in a
// key of its own that outlives the lock, so an operator's DEL of the lock
// key cannot make a token repeat. It is the floor plus one INCR of that
// counter in the acquisition's atomic step, and a compare-and-delete
// release that leaves the counter. No reentry, no queue, no renewal, no
// record of past owners, no refusal of foreign values: it measures what
// the token itself costs, so that redfence's distance from the floor can
// be split into the token's share and the rest.
//
// In its "multi" variant the acquisition is MULTI, SET NX PX, INCR, EXEC
// in one round trip, no script: the INCR runs even when the SET finds the
// lock taken, which leaves gaps in the tokens but never repeats or lowers
// one. In its "lua" variant it is one script that runs INCR only after
// SET NX succeeded: the cheapest acquisition that can decide anything (the
// shape any lock with reentry or a queue needs).
type fenced struct {
	rdb    *redis.Client
	floor  *floor // its release, made once
	lua    bool
	ttlMS  int64
	prefix string // random per client, so values never repeat across processes
	seq    atomic.Uint64
}

var _ locker = (*fenced)(nil)

func fencedSystem(lua bool) system {
	name := "fenced-multi"
	if lua {
		name = "fenced-lua"
	}
	return system{
		name: name,
		open: func(rdb *redis.Client, ttl time.Duration) (locker, error) {
			var b [8]byte
			_, _ = crand.Read(b[:])
			return &fenced{rdb: rdb, floor: &floor{rdb: rdb}, lua: lua, ttlMS: ttl.Milliseconds(),
				prefix: hex.EncodeToString(b[:]) + ":"}, nil
		},
		kept: "the counter (forever)",
	}
}

var errNoToken = errors.New("bench: fenced acquisition returned no token")

func (f *fenced) lock(ctx context.Context, name string) (unlocker, error) {
	key := "fenced:{" + name + "}"
	ckey := key + ":t"
	val := f.prefix + strconv.FormatUint(f.seq.Add(1), 36)
	t := time.NewTimer(floorPoll)
	defer t.Stop()
	for {
		token, err := f.try(ctx, key, ckey, val)
		switch {
		case err != nil:
			return nil, err
		case token > 0:
			return &fencedLock{floorLock: floorLock{f: f.floor, key: key, val: val}, token: token}, nil
		}
		if !sleepCtx(ctx, t, floorPoll) {
			return nil, ctx.Err()
		}
	}
}

// try makes one attempt: the new token, or 0 when the lock is held.
func (f *fenced) try(ctx context.Context, key, ckey, val string) (int64, error) {
	if f.lua {
		return fencedAcquire.Run(ctx, f.rdb, []string{key, ckey}, val, f.ttlMS).Int64()
	}
	var set *redis.StatusCmd
	var incr *redis.IntCmd
	_, err := f.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		set = p.SetArgs(ctx, key, val, redis.SetArgs{Mode: "NX", TTL: time.Duration(f.ttlMS) * time.Millisecond})
		incr = p.Incr(ctx, ckey)
		return nil
	})
	switch {
	case errors.Is(set.Err(), redis.Nil):
		return 0, nil
	case err != nil:
		return 0, err
	case incr.Val() <= 0:
		return 0, errNoToken
	}
	return incr.Val(), nil
}

func (f *fenced) close() error { return nil }

// fencedLock is a held fenced lock: the floor's release (the counter stays)
// and the token the acquisition returned.
type fencedLock struct {
	floorLock
	token int64
}
