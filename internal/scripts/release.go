package scripts

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
)

// Released is release.lua's answer.
type Released struct {
	// Depth is the depth left when the ownership held the level's lock
	// (0: the lock is released); -1 when it does not hold the lock.
	Depth int64
	// Free, with Depth -1: the name is free and no token was issued on
	// its counter since the ownership's, so that nobody took the lock
	// since; what a retried release finds after its first attempt freed
	// the lock.
	Free bool
	// Forced, with Depth -1: the record of the forced unlock that ended
	// the ownership, when it lives.
	Forced *Forced
}

// Release runs release.lua for the level taken by the Lock call whose
// request ID is level. A lock handed to a waiter gets a token issued as m
// says.
func Release(ctx context.Context, rdb redis.Scripter, k Keys, owner string, token fence.Token, level string, m Tokens) (Released, error) {
	return ReleaseWaking(ctx, rdb, k, owner, token, level, m, "")
}

// ReleaseWaking is Release that, when it frees a lock that refused some
// QAcquire (0 from the last level), also publishes an empty message on
// channel, in the same script: a Redlock node's waiters listen there. A
// lock nobody was refused publishes nothing, nor does channel "".
func ReleaseWaking(ctx context.Context, rdb redis.Scripter, k Keys, owner string, token fence.Token, level string, m Tokens, channel string) (Released, error) {
	if k.Kind != 0 {
		return releaseShared(ctx, rdb, k, owner, token, level, m)
	}
	a := new(argv)
	// The queue and the forced-unlock record are named from the hold's key
	// in the script, which needs them only on the paths that are not the
	// uncontended release: an argument costs more than a command there.
	a.args = [len(a.args)]any{nil, nil, 2, k.arg(lockKey), k.counter(m),
		a.str(0, owner), a.num(1, int64(token)), a.str(2, level), a.str(3, m.arg()), nil}
	args := a.args[:9]
	if channel != "" {
		a.args[9] = a.str(4, channel)
		args = a.args[:10]
	}
	v, err := run(ctx, rdb, releaseScript, args)
	if err != nil {
		return Released{}, scriptErr(err)
	}
	return parseRelease(v, token)
}

// parseRelease decodes a release reply for the ownership with token tok.
func parseRelease(v any, tok fence.Token) (Released, error) {
	if a, ok := v.([]any); ok {
		f, err := parseForcedReply("release", v, a, -1, tok)
		return Released{Depth: -1, Forced: f}, err
	}
	n, ok := v.(int64)
	switch {
	case !ok || n < -2:
		return Released{}, fmt.Errorf("%w: release returned %#v", ErrReply, v)
	case n == -2:
		return Released{Depth: -1, Free: true}, nil
	}
	return Released{Depth: n}, nil
}
