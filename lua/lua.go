// Package lua holds the Redis scripts behind redfence's locks and typed Go
// wrappers for them. Each script lives in its own .lua file, embedded and
// wrapped once as a *redis.Script; Run sends EVALSHA and falls back to EVAL
// when the server answers NOSCRIPT (after SCRIPT FLUSH or a restart).
//
// The scripts are the whole of the lock's server-side logic; see each file's
// header for its KEYS, ARGV and every reply. The reply parsers are exported
// separately so they can be tested and fuzzed without a server.
package lua

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
)

var (
	//go:embed lib.lua
	libSrc string
	//go:embed acquire.lua
	acquireSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed inspect.lua
	inspectSrc string
	//go:embed abandon.lua
	abandonSrc string
)

// The scripts, loaded once per process. Each is lib.lua followed by the
// script's own file, so the helpers that recognise a lock exist once.
var (
	AcquireScript = redis.NewScript(libSrc + acquireSrc)
	ReleaseScript = redis.NewScript(libSrc + releaseSrc)
	ExtendScript  = redis.NewScript(libSrc + extendSrc)
	InspectScript = redis.NewScript(libSrc + inspectSrc)
	AbandonScript = redis.NewScript(libSrc + abandonSrc)
)

// Scripts lists every script, for tests that load them all into a server.
var Scripts = map[string]*redis.Script{
	"acquire": AcquireScript,
	"release": ReleaseScript,
	"extend":  ExtendScript,
	"inspect": InspectScript,
	"abandon": AbandonScript,
}

// Source returns lib.lua followed by the named script's source, as the
// server runs it; for tests that run a modified copy.
func Source(name string) string {
	return libSrc + map[string]string{"acquire": acquireSrc, "release": releaseSrc,
		"extend": extendSrc, "inspect": inspectSrc, "abandon": abandonSrc}[name]
}

var (
	// ErrForeign reports a lock hash or wait queue holding a value
	// this library did not write. Nothing was changed. The error names the
	// key and wraps the server's reply, so errors.As finds a redis.Error.
	ErrForeign = errors.New("lua: key holds a foreign value")

	// ErrOverflow reports a next token at 2^53 or beyond, which the
	// scripts cannot represent exactly; the lock was not taken. At a
	// million acquisitions a second a counter takes 285 years to get there;
	// time tokens (microseconds since 1970) get there in 2255.
	ErrOverflow = errors.New("lua: fencing counter beyond 2^53")

	// ErrReply reports a script reply of an unexpected shape: a server that
	// is not Redis-compatible, or a script of another version.
	ErrReply = errors.New("lua: malformed script reply")
)

// Tokens says how the scripts issue a fresh token: at a free-to-held
// acquisition, and when a release or an undo hands the lock to a waiter.
// The zero value is the strict counter.
type Tokens struct {
	// Time makes a fresh token max(counter + 1, the server's TIME in
	// microseconds) instead of counter + 1, so that a lost counter does not
	// restart tokens at 1. Without it the counter never expires.
	Time bool
	// Idle is, with Time, how long the counter outlives the last token
	// issued; rounded down to milliseconds, at least 1 ms.
	Idle time.Duration
}

// arg is the scripts' token-mode ARGV (lib.lua): 0 for the counter, the
// counter's idle expiry in ms for time tokens.
func (m Tokens) arg() int64 {
	if !m.Time {
		return 0
	}
	return max(m.Idle.Milliseconds(), 1)
}

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
	Level    string        // the level ID: the request ID of one Lock call
	TTL      time.Duration // the lease; whole milliseconds
	Meta     string        // metadata of a fresh ownership, "" for none; no newline
	MaxDepth int64         // the deepest hold a reentry may make; 0: no limit
	Waiter   *Waiter       // non-nil: the call waits in the queue
	Tokens   Tokens        // how a fresh token is issued
}

// Waiter describes a Lock call that waits in the lock's queue: the lock,
// when it is freed and this waiter is the oldest, is handed to it, and a
// message "<level ID> <token>" is published on Channel. The waiter then
// has Claim to claim it (by calling acquire again with its level ID)
// before the lock expires and passes on.
type Waiter struct {
	Channel string        // where the waiter's client listens
	Claim   time.Duration // how long a handed lock waits to be claimed
	Queue   time.Duration // how long the queue outlives its last poll
}

// member is r's queue entry (layout in lib.lua), "" when r does not wait.
func (r *Request) member() string {
	w := r.Waiter
	if w == nil {
		return ""
	}
	return r.Level + "\n" + strconv.FormatInt(max(w.Claim.Milliseconds(), 1), 10) + "\n" + r.Owner + "\n" + r.Meta + "\n" + w.Channel
}

func acquireArgs(k Keys, r *Request) ([]string, []any) {
	var queue int64
	if r.Waiter != nil {
		queue = max(r.Waiter.Queue.Milliseconds(), 1)
	}
	depth := r.MaxDepth
	if depth <= 0 {
		depth = math.MaxInt32
	}
	return []string{k.Lock, k.Queue}, []any{r.Owner, r.TTL.Milliseconds(), r.Level, r.member(), queue, r.Tokens.arg(), r.Meta, depth}
}

// Acquire runs acquire.lua for r without waiting: a free lock others queue
// for is handed to the oldest of them and not taken. With r.Waiter, the
// caller joins the queue (or stays in it) when it does not get the lock.
// See the script's header for its semantics.
func Acquire(ctx context.Context, rdb redis.Scripter, k Keys, r *Request) (Acquired, error) {
	keys, args := acquireArgs(k, r)
	v, err := AcquireScript.Run(ctx, rdb, keys, args...).Result()
	if err != nil {
		return Acquired{}, scriptErr(err)
	}
	return ParseAcquire(v)
}

// AcquireAcked runs acquire.lua and then WAIT replicas timeout in one
// pipeline on node, the primary that owns k's slot: WAIT counts the writes
// of its own connection, so it must follow the script on the same one. It
// returns the acquire reply and how many replicas acknowledged it.
func AcquireAcked(ctx context.Context, node *redis.Client, k Keys, r *Request, replicas int, timeout time.Duration) (Acquired, int64, error) {
	keys, args := acquireArgs(k, r)
	run := func(eval func(redis.Pipeliner) *redis.Cmd) (*redis.Cmd, *redis.Cmd, error) {
		pipe := node.Pipeline()
		acq := eval(pipe)
		ack := pipe.Do(ctx, "WAIT", replicas, timeout.Milliseconds())
		_, err := pipe.Exec(ctx)
		return acq, ack, err
	}
	acq, ack, err := run(func(p redis.Pipeliner) *redis.Cmd { return AcquireScript.EvalSha(ctx, p, keys, args...) })
	if acq != nil && redis.HasErrorPrefix(acq.Err(), "NOSCRIPT") {
		acq, ack, err = run(func(p redis.Pipeliner) *redis.Cmd { return AcquireScript.Eval(ctx, p, keys, args...) })
	}
	if err := acq.Err(); err != nil {
		return Acquired{}, 0, scriptErr(err)
	}
	if err != nil {
		return Acquired{}, 0, err
	}
	a, err := ParseAcquire(acq.Val())
	if err != nil {
		return Acquired{}, 0, err
	}
	n, err := ack.Int64()
	if err != nil {
		return Acquired{}, 0, fmt.Errorf("%w: WAIT returned %v", ErrReply, err)
	}
	return a, n, nil
}

// ParseAcquire decodes an acquire reply.
func ParseAcquire(v any) (Acquired, error) {
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

// Release runs release.lua for the level taken by the Lock call whose
// request ID is level, and returns the depth left, or -1 when the caller's
// ownership does not hold the lock. A lock handed to a waiter gets a token
// issued as m says.
func Release(ctx context.Context, rdb redis.Scripter, k Keys, owner string, token fence.Token, level string, m Tokens) (int64, error) {
	v, err := ReleaseScript.Run(ctx, rdb, []string{k.Lock, k.Queue}, owner, token.String(), level, m.arg()).Result()
	if err != nil {
		return 0, scriptErr(err)
	}
	return ParseRelease(v)
}

// ParseRelease decodes a release reply.
func ParseRelease(v any) (int64, error) {
	n, ok := v.(int64)
	if !ok || n < -1 {
		return 0, fmt.Errorf("%w: release returned %#v", ErrReply, v)
	}
	return n, nil
}

// Extend runs extend.lua and reports whether the ownership still held the
// lock and now has ttl left. m sets the hash's own expiry (time tokens).
func Extend(ctx context.Context, rdb redis.Scripter, k Keys, owner string, token fence.Token, ttl time.Duration, m Tokens) (bool, error) {
	v, err := ExtendScript.Run(ctx, rdb, []string{k.Lock}, owner, token.String(), ttl.Milliseconds(), m.arg()).Result()
	if err != nil {
		return false, scriptErr(err)
	}
	return ParseExtend(v)
}

// ExtendReq names one ownership for [ExtendBatch].
type ExtendReq struct {
	Keys  Keys
	Owner string
	Token fence.Token
	TTL   time.Duration // the lease from now; whole milliseconds
}

// ExtendResult is the outcome of one [ExtendReq]: as [Extend]'s, plus Sent,
// the instant before the pipeline that carried its last attempt was sent.
// Redis started the new TTL no earlier than Sent.
type ExtendResult struct {
	Held bool
	Err  error
	Sent time.Time
}

// ExtendBatch runs extend.lua for every request in one go-redis pipeline on
// rdb: one round trip per Redis node (a Cluster or Ring client splits the
// pipeline by node itself). Entries answered NOSCRIPT (after SCRIPT FLUSH or
// a restart) are sent again with EVAL in a second pipeline, which also
// loads the script for the next batch. The i-th result answers reqs[i].
func ExtendBatch(ctx context.Context, rdb redis.Cmdable, reqs []ExtendReq, m Tokens) []ExtendResult {
	out := make([]ExtendResult, len(reqs))
	idx := make([]int, len(reqs))
	for i := range idx {
		idx[i] = i
	}
	run := func(idx []int, eval func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd) []int {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(idx))
		for j, i := range idx {
			r := reqs[i]
			cmds[j] = eval(ctx, pipe, []string{r.Keys.Lock}, r.Owner, r.Token.String(), r.TTL.Milliseconds(), m.arg())
		}
		sent := time.Now()
		_, execErr := pipe.Exec(ctx)
		var noscript []int
		for j, i := range idx {
			v, err := cmds[j].Result()
			if err == nil && v == nil && execErr != nil {
				err = execErr // a command the pipeline never got to
			}
			if redis.HasErrorPrefix(err, "NOSCRIPT") {
				noscript = append(noscript, i)
			}
			out[i] = ExtendResult{Err: scriptErr(err), Sent: sent}
			if err == nil {
				out[i].Held, out[i].Err = ParseExtend(v)
			}
		}
		return noscript
	}
	if again := run(idx, ExtendScript.EvalSha); len(again) > 0 {
		run(again, ExtendScript.Eval)
	}
	return out
}

// ParseExtend decodes an extend reply.
func ParseExtend(v any) (bool, error) {
	n, ok := v.(int64)
	if !ok || (n != 0 && n != 1) {
		return false, fmt.Errorf("%w: extend returned %#v", ErrReply, v)
	}
	return n == 1, nil
}

// Abandon runs abandon.lua for the acquisition r: it takes r's waiter (if
// r waits) out of the queue, and removes the level r took, if it was applied
// or the lock handed to it and the level is still there. It reports whether
// it removed a level. A lock it hands to the next waiter gets a token
// issued as r.Tokens says.
func Abandon(ctx context.Context, rdb redis.Scripter, k Keys, r *Request) (bool, error) {
	v, err := AbandonScript.Run(ctx, rdb, []string{k.Lock, k.Queue}, r.Owner, r.Level, r.member(), r.Tokens.arg()).Result()
	if err != nil {
		return false, scriptErr(err)
	}
	return ParseExtend(v)
}

// State is a snapshot of one lock, as the inspect script reads it in one
// atomic step.
type State struct {
	Name      string        // the lock's name
	Held      bool          // whether an ownership holds the lock
	Owner     string        // the holder; empty when free
	Depth     int64         // reentry depth; 0 when free
	Token     fence.Token   // the holder's token; None when free
	TTL       time.Duration // what is left of the lease; 0 when free (a held lock always has a lease)
	Meta      string        // the holder's metadata (see reentrant.WithMetadata); empty when free or none
	LastToken fence.Token   // the last token issued; None if never, or if a time-mode hash expired idle
	LastOwner string        // the owner of the last ownership, the holder's when held; empty if none
	Levels    []string      // the level IDs of the hold, in no order; nil when free
	Waiters   int64         // Lock calls in the queue
	Ended     []Ended       // ownerships known to have ended, lowest token first
}

// Ended is an ownership that has ended, as the lock hash records it: the
// last one while the lock is free, and the 16 most recent whose lease ran
// out.
type Ended struct {
	Token   fence.Token
	Owner   string
	Expired bool // its lease ran out; false: released
}

// Inspect runs inspect.lua.
func Inspect(ctx context.Context, rdb redis.Scripter, k Keys) (State, error) {
	v, err := InspectScript.Run(ctx, rdb, []string{k.Lock, k.Queue}).Result()
	if err != nil {
		return State{}, scriptErr(err)
	}
	s, err := ParseInspect(v)
	s.Name = k.Name
	return s, err
}

// ParseInspect decodes an inspect reply.
func ParseInspect(v any) (State, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 9 {
		return State{}, fmt.Errorf("%w: inspect returned %#v", ErrReply, v)
	}
	bad := func(what string, err error) (State, error) {
		return State{}, fmt.Errorf("%w: inspect %s: %v (reply %#v)", ErrReply, what, err, v)
	}
	var s State
	owner, _ := a[0].(string)
	s.Owner, s.Held = owner, owner != ""
	if a[8] != nil {
		if s.Meta, ok = a[8].(string); !ok || s.Owner == "" {
			return bad("meta", nil)
		}
	}
	if t, ok := a[1].(string); ok {
		tok, err := fence.Parse(t)
		if err != nil || tok == fence.None {
			return bad("token", err)
		}
		s.Token = tok
	}
	pttl, ok := a[2].(int64)
	if !ok || pttl < -2 || pttl == -1 || (pttl == -2) != (s.Owner == "") {
		return bad("pttl", nil)
	}
	if pttl > 0 {
		s.TTL = millis(pttl)
	}
	c, ok := a[3].(int64)
	if !ok || c < 0 {
		return bad("counter", nil)
	}
	s.LastToken = fence.Token(c)
	levels, ok := a[4].([]any)
	if !ok {
		return bad("levels", nil)
	}
	for _, l := range levels {
		id, ok := l.(string)
		if !ok {
			return bad("levels", nil)
		}
		s.Levels = append(s.Levels, id)
	}
	s.Depth = int64(len(s.Levels))
	if s.Waiters, ok = a[5].(int64); !ok || s.Waiters < 0 {
		return bad("waiters", nil)
	}
	s.LastOwner, _ = a[6].(string)
	ended, ok := a[7].([]any)
	if !ok || len(ended)%3 != 0 {
		return bad("ended", nil)
	}
	for i := 0; i < len(ended); i += 3 {
		ts, _ := ended[i].(string)
		owner, _ := ended[i+1].(string)
		how, _ := ended[i+2].(string)
		tok, err := fence.Parse(ts)
		if err != nil || tok == fence.None || (how != "expired" && how != "released") {
			return bad("ended", err)
		}
		s.Ended = append(s.Ended, Ended{Token: tok, Owner: owner, Expired: how == "expired"})
	}
	sort.Slice(s.Ended, func(i, j int) bool { return s.Ended[i].Token < s.Ended[j].Token })
	if (s.Owner == "") != (s.Token == fence.None) || (s.Owner == "") != (s.Depth == 0) {
		return bad("fields", errors.New("owner, token and levels must be all present or all absent"))
	}
	return s, nil
}

// millis converts a PTTL reply to a Duration. A key given an expiry
// centuries away (PEXPIREAT by someone else) has a PTTL beyond what a
// Duration holds; it saturates at the largest Duration, which is still
// "longer than anyone will wait", instead of wrapping to a negative value.
func millis(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// scriptErr turns the scripts' own refusals into typed errors that still
// wrap the server's reply (errors.As finds the redis.Error), and passes
// every other error (network, OOM, READONLY...) on as it came.
func scriptErr(err error) error {
	switch {
	case redis.HasErrorPrefix(err, "FOREIGN"):
		return fmt.Errorf("%w: %w", ErrForeign, err)
	case redis.HasErrorPrefix(err, "OVERFLOW"):
		return fmt.Errorf("%w: %w", ErrOverflow, err)
	}
	return err
}

// IsRefusal reports whether err is one of the scripts' own refusals
// (ErrForeign, ErrOverflow): the script ran, checked, and changed nothing.
func IsRefusal(err error) bool {
	return errors.Is(err, ErrForeign) || errors.Is(err, ErrOverflow)
}
