package scripts

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
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
	HolderTTL time.Duration // what is left of the holder's lease when neither
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

// member is r's queue entry (layout in queue.lua), "" when r does not wait.
func (r *Request) member() string {
	w := r.Waiter
	if w == nil {
		return ""
	}
	kind := byte('p')
	if w.Sharded {
		kind = 's'
	}
	// Built in one buffer, which becomes the string: one allocation.
	var b strings.Builder
	b.Grow(len(r.Level) + len(r.Owner) + len(r.Meta) + len(w.Channel) + 32)
	b.WriteString(r.Level)
	b.WriteByte('\n')
	var digits [20]byte
	b.Write(strconv.AppendInt(digits[:0], max(w.Claim.Milliseconds(), 1), 10))
	b.WriteByte('\n')
	b.WriteString(r.Owner)
	b.WriteByte('\n')
	b.WriteString(r.Meta)
	b.WriteByte('\n')
	b.WriteByte(kind)
	b.WriteString(w.Channel)
	return b.String()
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
	args   [15]any
}

// arg is one value of an argv.
type arg struct{ b []byte }

// MarshalBinary returns the value as go-redis writes it.
func (a *arg) MarshalBinary() ([]byte, error) { return a.b, nil }

// String returns the value as text, for whoever prints the command.
func (a *arg) String() string { return string(a.b) }

// str stores v as the vector's i-th value and returns it as an argument.
// The bytes are v's own, which go-redis only reads.
func (a *argv) str(i int, v string) any {
	a.vals[i].b = unsafe.Slice(unsafe.StringData(v), len(v))
	return &a.vals[i]
}

// num stores v in decimal as the vector's i-th value and returns it as an
// argument.
func (a *argv) num(i int, v int64) any {
	b := strconv.AppendInt(a.digits[a.used:a.used], v, 10)
	a.used += len(b)
	a.vals[i].b = b[:len(b):len(b)]
	return &a.vals[i]
}

// noDepthLimit is acquire's ARGV[8] for a request without MaxDepth, and
// again its ARGV[9] for an attempt after a call's first, boxed once.
var (
	noDepthLimit any = int64(math.MaxInt32)
	again        any = "1"
)

// acquireArgs returns the argument vector of acquire.lua for r, the first
// two left for run: [cmd, script, 3, keys..., ARGV...].
func acquireArgs(k Keys, r *Request) []any {
	var queue int64
	if r.Waiter != nil {
		queue = max(r.Waiter.Queue.Milliseconds(), 1)
	}
	depth := noDepthLimit
	a := new(argv)
	if r.MaxDepth > 0 {
		depth = a.num(7, r.MaxDepth)
	}
	a.args = [15]any{nil, nil, 3, k.arg(0), k.arg(1), k.counter(r.Tokens), a.str(0, r.Owner), a.num(1, r.TTL.Milliseconds()),
		a.str(2, r.Level), a.str(3, r.member()), a.num(4, queue), a.str(5, r.Tokens.arg()), a.str(6, r.Meta), depth, again}
	if !r.Again {
		// A first attempt sends no ARGV[9]: the common path's command is
		// as long as before the flag existed.
		return a.args[:14]
	}
	return a.args[:]
}

// Acquire runs acquire.lua for r without waiting: a free lock others queue
// for is handed to the oldest of them and not taken. With r.Waiter, the
// caller joins the queue (or stays in it) when it does not get the lock.
// See the script's header for its semantics.
func Acquire(ctx context.Context, rdb redis.Scripter, k Keys, r *Request) (Acquired, error) {
	v, err := run(ctx, rdb, acquireScript, acquireArgs(k, r))
	if err != nil {
		return Acquired{}, scriptErr(err)
	}
	return parseAcquire(v)
}

// AcquireAcked runs acquire.lua and then WAIT replicas timeout in one
// pipeline on node, the primary that owns k's slot: WAIT counts the writes
// of its own connection, so it must follow the script on the same one. It
// returns the acquire reply and how many replicas acknowledged it. A
// server that lacks the library (then loaded) or the script is sent the
// pipeline again, so the call then waits up to timeout once more for each
// such answer (twice at most): the WAIT runs whether or not the script did.
func AcquireAcked(ctx context.Context, node *redis.Client, k Keys, r *Request, replicas int, timeout time.Duration) (Acquired, int64, error) {
	argv := acquireArgs(k, r)
	// As run: FCALL where the server has Functions (the library loaded
	// once if missing), else EVALSHA, and EVAL after NOSCRIPT; the WAIT in
	// every pipeline.
	b := pipelined(ctx, node, acquireScript, 1, len(argv)-2, func(dst []any, _ int) []any { return append(dst, argv[2:]...) },
		"WAIT", replicas, timeout.Milliseconds())
	acq, ack, err := b.cmds[0], b.tail, b.execs[0]
	if err := acq.Err(); err != nil {
		return Acquired{}, 0, scriptErr(err)
	}
	if err != nil {
		return Acquired{}, 0, err
	}
	a, err := parseAcquire(acq.Val())
	if err != nil {
		return Acquired{}, 0, err
	}
	n, err := ack.Int64()
	if err != nil {
		return Acquired{}, 0, fmt.Errorf("%w: WAIT returned %v", ErrReply, err)
	}
	return a, n, nil
}

// parseAcquire decodes an acquire reply.
func parseAcquire(v any) (Acquired, error) {
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
	a := new(argv)
	a.args = [len(a.args)]any{nil, nil, 3, k.arg(0), k.arg(1), k.counter(r.Tokens), a.str(0, r.Owner), a.str(1, r.Level),
		a.str(2, r.member()), a.str(3, r.Tokens.arg())}
	v, err := run(ctx, rdb, abandonScript, a.args[:10])
	if err != nil {
		return false, scriptErr(err)
	}
	return parseFlag("abandon", v)
}
