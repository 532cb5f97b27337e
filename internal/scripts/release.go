package scripts

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
)

// Release runs release.lua for the level taken by the Lock call whose
// request ID is level, and returns the depth left, or -1 when the caller's
// ownership does not hold the lock. A lock handed to a waiter gets a token
// issued as m says.
func Release(ctx context.Context, rdb redis.Scripter, k Keys, owner string, token fence.Token, level string, m Tokens) (int64, error) {
	return ReleaseWaking(ctx, rdb, k, owner, token, level, m, "")
}

// ReleaseWaking is Release that, when it frees the lock (0 from the last
// level), also publishes an empty message on channel, in the same script:
// a Redlock node's waiters listen there. "" publishes nothing.
func ReleaseWaking(ctx context.Context, rdb redis.Scripter, k Keys, owner string, token fence.Token, level string, m Tokens, channel string) (int64, error) {
	a := new(argv)
	a.args = [len(a.args)]any{nil, nil, 3, k.arg(0), k.arg(1), k.counter(m), a.str(0, owner), a.num(1, int64(token)),
		a.str(2, level), a.str(3, m.arg()), nil}
	args := a.args[:10]
	if channel != "" {
		a.args[10] = a.str(4, channel)
		args = a.args[:11]
	}
	v, err := run(ctx, rdb, releaseScript, args)
	if err != nil {
		return 0, scriptErr(err)
	}
	return parseRelease(v)
}

// parseRelease decodes a release reply.
func parseRelease(v any) (int64, error) {
	n, ok := v.(int64)
	if !ok || n < -1 {
		return 0, fmt.Errorf("%w: release returned %#v", ErrReply, v)
	}
	return n, nil
}
