package scripts

import (
	"context"
	"fmt"
	"math"
	"time"

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
	// Joining is set when the node refused because it is joining: it was
	// found empty less than the rejoin delay ago (see [Node]); HolderTTL
	// is then what is left of the delay.
	Joining bool
}

// Node is what qacquire.lua needs of a Redlock node besides a lock's keys:
// the key of its join record and the rejoin delay.
type Node struct {
	Joined string        // P:j, see JoinedKey
	Rejoin time.Duration // whole milliseconds, at least 1 ms
}

// JoinedKey is the key of a Redlock node's join record under prefix: when
// (server time in ms) the node was first found without one. An operator
// who knows a new node has granted nothing may set it to 1 to spare its
// first use the rejoin delay.
func JoinedKey(prefix string) string { return prefix + ":j" }

// QAcquire runs qacquire.lua, phase 1 of a Redlock acquisition on one node:
// r's Waiter and Tokens are ignored (Redlock neither queues nor issues time
// tokens). See the script's header.
func QAcquire(ctx context.Context, rdb redis.Scripter, k Keys, node Node, r *Request) (QAcquired, error) {
	depth := r.MaxDepth
	if depth <= 0 {
		depth = math.MaxInt32
	}
	v, err := run(ctx, rdb, qacquireScript, []any{nil, nil, 3, k.Lock, k.Counter, node.Joined, r.Owner, r.TTL.Milliseconds(), r.Level, r.Meta, depth,
		max(node.Rejoin.Milliseconds(), 1)})
	if err != nil {
		return QAcquired{}, scriptErr(err)
	}
	if a, ok := v.([]any); ok && len(a) == 3 && a[0] == int64(4) {
		wait, ok := a[1].(int64)
		if !ok || wait <= 0 || a[2] != int64(0) {
			return QAcquired{}, fmt.Errorf("%w: qacquire returned %#v", ErrReply, v)
		}
		return QAcquired{Acquired: Acquired{HolderTTL: millis(wait)}, Joining: true}, nil
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
