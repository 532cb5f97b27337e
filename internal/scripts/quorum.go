package scripts

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
)

// MaxToken is 2^53, the first token the scripts cannot issue: Lua's numbers
// are doubles, exact below it.
const MaxToken fence.Token = 1 << 53

// QAcquired is the reply of qacquire.lua on one Redlock node.
type QAcquired struct {
	Acquired
	// Pending is set when the caller holds the lock on this node without a
	// token: Token is then the node's counter (possibly 0), to be raised
	// with [QRaise].
	Pending bool
	// Micros is, when Pending or Proposed, the node's clock (TIME) in
	// microseconds when it granted the hold.
	Micros uint64
	// Joining is set when the node refused because it is joining: it was
	// found empty less than the rejoin delay ago (see [Node]); HolderTTL
	// is then what is left of the delay.
	Joining bool
	// Proposed is set when the node took the lock with the token proposed
	// to it ([QAcquirePropose]): Token is that token, its counter is
	// raised to it, and no phase 2 is needed here.
	Proposed bool
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
	return QAcquirePropose(ctx, rdb, k, node, r, fence.None)
}

// MaxLead is how far a proposed token may be from the clock (µs) of a
// node that takes it, ahead or behind ([QAcquirePropose]).
const MaxLead = 5 * time.Millisecond

// QAcquirePropose is QAcquire with a proposed token: where the lock is
// free, the token is above the node's counter and at most MaxLead from its
// clock (µs), either way, the node takes the lock with it at once and
// says so (Proposed),
// which spares the node phase 2; elsewhere the take is pending as without
// a proposal. Propose only for an owner that holds the lock on no node yet,
// and hand the token out only when a majority took it (see qacquire.lua).
// fence.None proposes nothing; a token at or above 2^53 is an error.
func QAcquirePropose(ctx context.Context, rdb redis.Scripter, k Keys, node Node, r *Request, proposal fence.Token) (QAcquired, error) {
	depth := r.MaxDepth
	if depth <= 0 {
		depth = math.MaxInt32
	}
	if proposal >= MaxToken {
		return QAcquired{}, fmt.Errorf("%w: proposed token %d is not below 2^53", ErrOverflow, proposal)
	}
	args := []any{nil, nil, 3, k.Lock, k.Counter, node.Joined, r.Owner, r.TTL.Milliseconds(), r.Level, r.Meta, depth,
		max(node.Rejoin.Milliseconds(), 1), nil}
	if proposal == fence.None {
		args = args[:len(args)-1]
	} else {
		args[len(args)-1] = uint64(proposal)
	}
	v, err := run(ctx, rdb, qacquireScript, args)
	if err != nil {
		return QAcquired{}, scriptErr(err)
	}
	if a, ok := v.([]any); ok && len(a) == 4 && a[0] == int64(5) {
		t, ok1 := a[1].(int64)
		us, ok2 := a[3].(int64)
		if !ok1 || !ok2 || us <= 0 || proposal == fence.None || t != int64(proposal) || a[2] != int64(1) {
			return QAcquired{}, fmt.Errorf("%w: qacquire returned %#v", ErrReply, v)
		}
		return QAcquired{Acquired: Acquired{OK: true, Token: proposal, Depth: 1}, Proposed: true, Micros: uint64(us)}, nil
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
	mode := ""
	if held {
		mode = "held"
	}
	return qraise(ctx, rdb, k, owner, level, tok, mode)
}

// QRaiseFrom is QRaise for a node that may have taken the lock with the
// attempt's proposal ([QAcquirePropose]) where the client chose tok
// instead: a hold of the level whose token is the proposal is raised to
// tok, when tok is above the node's counter; a pending one as by QRaise.
func QRaiseFrom(ctx context.Context, rdb redis.Scripter, k Keys, owner, level string, tok, proposal fence.Token) (bool, error) {
	if proposal == fence.None {
		return QRaise(ctx, rdb, k, owner, level, tok, false)
	}
	return qraise(ctx, rdb, k, owner, level, tok, proposal.String())
}

func qraise(ctx context.Context, rdb redis.Scripter, k Keys, owner, level string, tok fence.Token, mode string) (bool, error) {
	if tok == fence.None {
		return false, fmt.Errorf("%w: token 0", ErrReply)
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
