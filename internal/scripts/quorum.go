package scripts

import (
	"context"
	"fmt"
	"math"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
)

// QAcquired is the reply of qacquire.lua on one Redlock node.
type QAcquired struct {
	Acquired
	// Pending is set when the caller holds the lock on this node without a
	// token: Token is then the node's counter (possibly 0), to be raised
	// with [QRaise].
	Pending bool
	// Micros is, when Pending, the node's clock (TIME) in microseconds when
	// it granted the hold.
	Micros uint64
}

// QAcquire runs qacquire.lua, phase 1 of a Redlock acquisition on one node:
// r's Waiter and Tokens are ignored (Redlock neither queues nor issues time
// tokens). See the script's header.
func QAcquire(ctx context.Context, rdb redis.Scripter, k Keys, r *Request) (QAcquired, error) {
	depth := r.MaxDepth
	if depth <= 0 {
		depth = math.MaxInt32
	}
	v, err := run(ctx, rdb, qacquireScript, []any{nil, nil, 2, k.Lock, k.Counter, r.Owner, r.TTL.Milliseconds(), r.Level, r.Meta, depth})
	if err != nil {
		return QAcquired{}, scriptErr(err)
	}
	if a, ok := v.([]any); ok && len(a) == 4 {
		n, ok1 := a[0].(int64)
		t, ok2 := a[1].(int64)
		d, ok3 := a[2].(int64)
		us, ok4 := a[3].(int64)
		if ok1 && ok2 && ok3 && ok4 && n == 3 && t >= 0 && d > 0 && us > 0 {
			return QAcquired{Acquired: Acquired{OK: true, Token: fence.Token(t), Depth: d}, Pending: true, Micros: uint64(us)}, nil
		}
		return QAcquired{}, fmt.Errorf("%w: qacquire returned %#v", ErrReply, v)
	}
	a, err := parseAcquire(v)
	return QAcquired{Acquired: a}, err
}

// QRaise runs qraise.lua, phase 2 of a Redlock acquisition on one node: it
// reports whether the node now holds the owner's level with token tok.
// held says that the ownership holds tok on other nodes already (a reentry
// that found its hold gone on this one): a counter that already reached tok
// is accepted then, where a fresh token must be above it.
func QRaise(ctx context.Context, rdb redis.Scripter, k Keys, owner, level string, tok fence.Token, held bool) (bool, error) {
	if tok == fence.None {
		return false, fmt.Errorf("%w: token 0", ErrReply)
	}
	mode := ""
	if held {
		mode = "held"
	}
	v, err := run(ctx, rdb, qraiseScript, []any{nil, nil, 2, k.Lock, k.Counter, owner, level, tok.String(), mode})
	if err != nil {
		return false, scriptErr(err)
	}
	return parseFlag("qraise", v)
}

// QBump raises the counter of a node where the lock is free to tok, a token
// already handed out, so that the node remembers it too; it reports whether
// it raised it (see qraise.lua).
func QBump(ctx context.Context, rdb redis.Scripter, k Keys, tok fence.Token) (bool, error) {
	return QRaise(ctx, rdb, k, "", "", tok, false)
}
