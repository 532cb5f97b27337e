package scripts

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
)

// Acquired is the reply of the acquire script.
type Acquired struct {
	OK        bool          // the caller holds the lock now
	TooDeep   bool          // a reentry refused: the hold is at Request.MaxDepth already
	Token     fence.Token   // the ownership's token, when OK or TooDeep
	Depth     int64         // the reentry depth, when OK or TooDeep
	HolderTTL time.Duration // what is left of the holder's lease when neither; -1 unknown (a waiting call)
	Slot      int           // a semaphore permit's slot, when OK; -1 for other holds
}

// Request is one Lock call's acquisition, as the acquire and abandon
// scripts see it.
type Request struct {
	Owner    string
	Level    string        // the level ID: the request ID of one Lock call; never starting with "*", which marks a LockMulti's queue entry (WakeMember)
	TTL      time.Duration // the lease; whole milliseconds
	Meta     string        // metadata of a fresh ownership, "" for none; no newline
	MaxDepth int64         // the deepest hold a reentry may make; 0: no limit
	Waiter   *Waiter       // non-nil: the call waits in the queue
	Tokens   Tokens        // how a fresh token is issued
	// Again marks an attempt of a waiting call after its first: an
	// earlier one may have queued it, so a reentry or a fresh take also
	// removes its queue entry, where a first attempt, which cannot have
	// one, spares that command.
	Again bool
}

// Waiter describes a Lock call that waits in the lock's queue: the lock,
// when it is freed and this waiter is the oldest, is handed to it, and a
// message "<level ID> <token>" is published on Channel. The waiter then
// has Claim to claim it (by calling acquire again with its level ID)
// before the lock expires and passes on.
type Waiter struct {
	Channel string        // where the waiter's client listens; not empty
	Claim   time.Duration // how long a handed lock waits to be claimed
	Queue   time.Duration // how long the queue outlives its last poll
	// Sharded publishes with SPUBLISH (Redis 7) instead of PUBLISH: on a
	// Cluster the message then goes to the lock's shard alone. Channel
	// must then be in the lock's slot (see SlotTag); a script may not
	// SPUBLISH elsewhere.
	Sharded bool
}

// appendMember appends r's queue entry (layout in queue.lua) to dst,
// nothing when r does not wait.
func (r *Request) appendMember(dst []byte) []byte {
	w := r.Waiter
	if w == nil {
		return dst
	}
	kind := byte('p')
	if w.Sharded {
		kind = 's'
	}
	dst = append(append(dst, r.Level...), '\n')
	dst = append(strconv.AppendInt(dst, max(w.Claim.Milliseconds(), 1), 10), '\n')
	dst = append(append(dst, r.Owner...), '\n')
	dst = append(append(dst, r.Meta...), '\n', kind)
	return append(dst, w.Channel...)
}

// argv is the argument vector of one script call, with the values it
// sends stored beside it. A string, or an int64 above 255, put in an
// interface is an allocation of its own; an *arg is not, so a vector costs
// one allocation whatever it holds. go-redis writes an *arg from its bytes
// (encoding.BinaryMarshaler), and hooks and logs that print a command see
// its text (fmt.Stringer), as they would a string. A vector's values are
// set when it is built and not changed after, so a command go-redis sends
// again (a retry) sends the same values; only its first two elements, the
// command and the script, are set anew for each way of sending it (run).
type argv struct {
	vals   [8]arg
	digits [4 * 20]byte // the numbers' text: four at most, of 20 digits at most
	used   int          // of digits
	args   [16]any
	// memberBuf holds the queue entry when it fits, as it does unless the
	// owner, metadata or channel is long: no allocation of its own.
	memberBuf [160]byte
}

// member stores r's queue entry as the vector's i-th value and returns it
// as an argument.
func (a *argv) member(i int, r *Request) any {
	b := r.appendMember(a.memberBuf[:0])
	a.vals[i].b = b[:len(b):len(b)]
	return &a.vals[i]
}

// arg is one value of an argv.
type arg struct{ b []byte }

// MarshalBinary returns the value as go-redis writes it.
func (a *arg) MarshalBinary() ([]byte, error) { return a.b, nil }

// String returns the value as text, for whoever prints the command.
func (a *arg) String() string { return string(a.b) }

// str stores v as the vector's i-th value and returns it as an argument.
func (a *argv) str(i int, v string) any {
	a.vals[i] = argOf(v)
	return &a.vals[i]
}

// argOf returns v as an arg. The bytes are v's own, which go-redis only
// reads.
func argOf(v string) arg { return arg{unsafe.Slice(unsafe.StringData(v), len(v))} }

// num stores v in decimal as the vector's i-th value and returns it as an
// argument.
func (a *argv) num(i int, v int64) any {
	b := strconv.AppendInt(a.digits[a.used:a.used], v, 10)
	a.used += len(b)
	a.vals[i].b = b[:len(b):len(b)]
	return &a.vals[i]
}

// DefaultMaxDepth is the depth bound the acquire script applies when a
// request leaves it out (Request.MaxDepth).
const DefaultMaxDepth = 1024

// Boxed once: acquire's ARGV[9] for an attempt after a call's first, the
// empty string of an optional argument left empty, and the bound of a
// request without one.
var (
	again        any = "1"
	empty        any = ""
	noDepthLimit any = int64(math.MaxInt32)
)

// acquireArgs returns the argument vector of acquire.lua for r, the first
// two left for run: [cmd, script, 4, keys..., ARGV...]. Trailing optional
// arguments at their defaults are left out: each argument costs the
// script more than most of its commands' work (docs/benchmarks.md).
func acquireArgs(k Keys, r *Request) []any {
	a := new(argv)
	a.args = [16]any{nil, nil, 4, k.arg(lockKey), k.arg(queueKey), k.counter(r.Tokens), k.other(r.Tokens),
		a.str(0, r.Owner), a.num(1, r.TTL.Milliseconds()), a.str(2, r.Level), a.str(3, r.Tokens.arg()),
		empty, empty, empty, empty, empty}
	n := 11
	if r.Waiter != nil {
		a.args[11], a.args[12] = a.member(4, r), a.num(5, max(r.Waiter.Queue.Milliseconds(), 1))
		n = 13
	}
	if r.Meta != "" {
		a.args[13], n = a.str(6, r.Meta), 14
	}
	switch {
	case r.MaxDepth <= 0:
		a.args[14], n = noDepthLimit, 15
	case r.MaxDepth != DefaultMaxDepth:
		a.args[14], n = a.num(7, r.MaxDepth), 15
	}
	if r.Again {
		a.args[15], n = again, 16
	}
	return a.args[:n]
}

// Acquire runs acquire.lua for r without waiting: a free lock others queue
// for is handed to the oldest of them and not taken. With r.Waiter, the
// caller joins the queue (or stays in it) when it does not get the lock.
// See the script's header for its semantics.
func Acquire(ctx context.Context, rdb redis.Scripter, k Keys, r *Request) (Acquired, error) {
	if k.Kind != 0 {
		return acquireShared(ctx, rdb, k, r)
	}
	v, err := run(ctx, rdb, acquireScript, acquireArgs(k, r))
	if err != nil {
		return Acquired{}, scriptErr(err)
	}
	return parseAcquire(v)
}

// AcquireAcked runs acquire.lua (sacquire.lua for the keys of a read-write
// lock or a semaphore) and then WAIT replicas timeout in one
// pipeline on node, the primary that owns k's slot: WAIT counts the writes
// of its own connection, so it must follow the script on the same one. It
// returns the acquire reply and how many replicas acknowledged it. A
// server that lacks the library (then loaded) or the script is sent the
// pipeline again, so the call then waits up to timeout once more for each
// such answer (twice at most): the WAIT runs whether or not the script did.
func AcquireAcked(ctx context.Context, node *redis.Client, k Keys, r *Request, replicas int, timeout time.Duration) (Acquired, int64, error) {
	// Keys of a read-write lock or a semaphore take sacquire.lua, as
	// Acquire does.
	s, argv, parse := acquireScript, []any(nil), parseAcquire
	if k.Kind != 0 {
		s, argv, parse = sacquireScript, sharedAcquireArgs(k, r), parseShared
	} else {
		argv = acquireArgs(k, r)
	}
	// As run: FCALL where the server has Functions (the library loaded
	// once if missing), else EVALSHA, and EVAL after NOSCRIPT; the WAIT in
	// every pipeline.
	b := pipelined(ctx, node, s, 1, len(argv)-2, func(dst []any, _ int) []any { return append(dst, argv[2:]...) },
		"WAIT", replicas, timeout.Milliseconds())
	acq, ack, err := b.cmds[0], b.tail, b.execs[0]
	if err := acq.Err(); err != nil {
		return Acquired{}, 0, scriptErr(err)
	}
	if err != nil {
		return Acquired{}, 0, err
	}
	a, err := parse(acq.Val())
	if err != nil {
		return Acquired{}, 0, err
	}
	n, err := ack.Int64()
	if err != nil {
		return Acquired{}, 0, fmt.Errorf("%w: WAIT returned %v", ErrReply, err)
	}
	return a, n, nil
}

// parseAcquire decodes an acquire reply: a fresh take's token alone, or a
// table.
func parseAcquire(v any) (Acquired, error) {
	switch t := v.(type) {
	case int64:
		if t > 0 {
			return Acquired{OK: true, Token: fence.Token(t), Depth: 1}, nil
		}
	case string:
		if tok, err := fence.Parse(t); err == nil && tok != fence.None && t[0] != '0' {
			return Acquired{OK: true, Token: tok, Depth: 1}, nil
		}
	}
	a, ok := v.([]any)
	if !ok || len(a) != 3 {
		return Acquired{}, fmt.Errorf("%w: acquire returned %#v", ErrReply, v)
	}
	var n [3]int64
	for i := range a {
		if n[i], ok = a[i].(int64); !ok {
			return Acquired{}, fmt.Errorf("%w: acquire returned %#v", ErrReply, v)
		}
	}
	switch {
	case n[0] == 1 && n[1] > 0 && n[2] > 0:
		return Acquired{OK: true, Token: fence.Token(n[1]), Depth: n[2]}, nil
	case n[0] == 2 && n[1] > 0 && n[2] > 0:
		return Acquired{TooDeep: true, Token: fence.Token(n[1]), Depth: n[2]}, nil
	case n[0] == 0 && n[1] == -1 && n[2] == 0:
		return Acquired{HolderTTL: -1}, nil // a waiting call is not told
	case n[0] == 0 && n[1] >= 0 && n[2] == 0:
		return Acquired{HolderTTL: millis(n[1])}, nil
	}
	return Acquired{}, fmt.Errorf("%w: acquire returned %#v", ErrReply, v)
}

// Abandon runs abandon.lua for the acquisition r: it takes r's waiter (if
// r waits) out of the queue, and removes the level r took, if it was applied
// or the lock handed to it and the level is still there. It reports whether
// it removed a level. A lock it hands to the next waiter gets a token
// issued as r.Tokens says.
func Abandon(ctx context.Context, rdb redis.Scripter, k Keys, r *Request) (bool, error) {
	if k.Kind != 0 {
		return abandonShared(ctx, rdb, k, r)
	}
	a := new(argv)
	a.args = [len(a.args)]any{nil, nil, 3, k.arg(lockKey), k.arg(queueKey), k.counter(r.Tokens), a.str(0, r.Owner),
		a.str(1, r.Level), a.member(2, r), a.str(3, r.Tokens.arg())}
	v, err := run(ctx, rdb, abandonScript, a.args[:10])
	if err != nil {
		return false, scriptErr(err)
	}
	return parseFlag("abandon", v)
}
