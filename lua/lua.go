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
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
)

var (
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

// The scripts, loaded once per process.
var (
	AcquireScript = redis.NewScript(acquireSrc)
	ReleaseScript = redis.NewScript(releaseSrc)
	ExtendScript  = redis.NewScript(extendSrc)
	InspectScript = redis.NewScript(inspectSrc)
	AbandonScript = redis.NewScript(abandonSrc)
)

// Scripts lists every script, for tests that load them all into a server.
var Scripts = map[string]*redis.Script{
	"acquire": AcquireScript,
	"release": ReleaseScript,
	"extend":  ExtendScript,
	"inspect": InspectScript,
	"abandon": AbandonScript,
}

var (
	// ErrWrongType reports a lock key, counter or tombstone holding a
	// value redfence did not write. The error names the key; the value is
	// left untouched.
	ErrWrongType = errors.New("lua: key holds a foreign value")

	// ErrOverflow reports a fencing counter past 2^53, beyond which the
	// scripts cannot represent tokens exactly. At a million acquisitions a
	// second a counter takes 285 years to get there.
	ErrOverflow = errors.New("lua: fencing counter beyond 2^53")

	// ErrReply reports a script reply of an unexpected shape: a server that
	// is not Redis-compatible, or a script of another version.
	ErrReply = errors.New("lua: malformed script reply")
)

// Acquired is the reply of the acquire script.
type Acquired struct {
	OK        bool          // the caller holds the lock now
	Token     fence.Token   // the ownership's token, when OK
	Depth     int64         // the reentry depth, when OK
	HolderTTL time.Duration // the holder's remaining TTL when !OK; -1 if none
}

// Acquire runs acquire.lua. See the script's header for its semantics.
func Acquire(ctx context.Context, rdb redis.Scripter, k Keys, owner string, ttl time.Duration, req string) (Acquired, error) {
	v, err := AcquireScript.Run(ctx, rdb, []string{k.Lock, k.Fence}, owner, ttl.Milliseconds(), req).Result()
	if err != nil {
		return Acquired{}, scriptErr(err)
	}
	return ParseAcquire(v)
}

// AcquireAcked runs acquire.lua and then WAIT replicas timeout in one
// pipeline on node, the primary that owns k's slot: WAIT counts the writes
// of its own connection, so it must follow the script on the same one. It
// returns the acquire reply and how many replicas acknowledged it.
func AcquireAcked(ctx context.Context, node *redis.Client, k Keys, owner string, ttl time.Duration, req string, replicas int, timeout time.Duration) (Acquired, int64, error) {
	keys, args := []string{k.Lock, k.Fence}, []any{owner, ttl.Milliseconds(), req}
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
	case n[0] == 0 && n[1] >= -2 && n[2] == 0:
		ttl := millis(n[1])
		if n[1] < 0 {
			// -2: the key vanished between HMGET and PTTL, which a script
			// cannot see; -1: no TTL. Either way there is no expiry to wait for.
			ttl = -1
		}
		return Acquired{HolderTTL: ttl}, nil
	}
	return Acquired{}, fmt.Errorf("%w: acquire returned %#v", ErrReply, v)
}

// Release runs release.lua and returns the depth left, or -1 when the
// caller's ownership does not hold the lock.
func Release(ctx context.Context, rdb redis.Scripter, k Keys, owner string, token fence.Token, req string, tombstoneTTL time.Duration) (int64, error) {
	v, err := ReleaseScript.Run(ctx, rdb, []string{k.Lock, k.TombstoneFor(req)},
		owner, token.String(), req, k.Channel, tombstoneTTL.Milliseconds()).Result()
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
// lock and now has ttl left.
func Extend(ctx context.Context, rdb redis.Scripter, k Keys, owner string, token fence.Token, ttl time.Duration) (bool, error) {
	v, err := ExtendScript.Run(ctx, rdb, []string{k.Lock}, owner, token.String(), ttl.Milliseconds()).Result()
	if err != nil {
		return false, scriptErr(err)
	}
	return ParseExtend(v)
}

// ParseExtend decodes an extend reply.
func ParseExtend(v any) (bool, error) {
	n, ok := v.(int64)
	if !ok || (n != 0 && n != 1) {
		return false, fmt.Errorf("%w: extend returned %#v", ErrReply, v)
	}
	return n == 1, nil
}

// Abandon runs abandon.lua: it undoes the acquire request req of owner if,
// and only if, that request was applied and nothing has happened to the
// lock since. It reports whether it undid anything.
func Abandon(ctx context.Context, rdb redis.Scripter, k Keys, owner, req string) (bool, error) {
	v, err := AbandonScript.Run(ctx, rdb, []string{k.Lock}, owner, req, k.Channel).Result()
	if err != nil {
		return false, scriptErr(err)
	}
	return ParseExtend(v)
}

// State is the reply of the inspect script.
type State struct {
	Owner     string        // empty when the lock is free
	Depth     int64         // reentry depth; 0 when free
	Token     fence.Token   // the current ownership's token; None when free
	TTL       time.Duration // remaining lease; -1 no TTL, -2 free
	LastToken fence.Token   // the last token ever issued; None if never
}

// Inspect runs inspect.lua.
func Inspect(ctx context.Context, rdb redis.Scripter, k Keys) (State, error) {
	v, err := InspectScript.Run(ctx, rdb, []string{k.Lock, k.Fence}).Result()
	if err != nil {
		return State{}, scriptErr(err)
	}
	return ParseInspect(v)
}

// ParseInspect decodes an inspect reply.
func ParseInspect(v any) (State, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 5 {
		return State{}, fmt.Errorf("%w: inspect returned %#v", ErrReply, v)
	}
	bad := func(what string, err error) (State, error) {
		return State{}, fmt.Errorf("%w: inspect %s: %v (reply %#v)", ErrReply, what, err, v)
	}
	var s State
	owner, _ := a[0].(string)
	s.Owner = owner
	if c, ok := a[1].(string); ok {
		d, err := strconv.ParseInt(c, 10, 64)
		if err != nil || d < 1 {
			return bad("count", err)
		}
		s.Depth = d
	}
	if t, ok := a[2].(string); ok {
		tok, err := fence.Parse(t)
		if err != nil || tok == fence.None {
			return bad("token", err)
		}
		s.Token = tok
	}
	pttl, ok := a[3].(int64)
	if !ok || pttl < -2 {
		return bad("pttl", nil)
	}
	s.TTL = millis(pttl)
	if pttl < 0 {
		s.TTL = time.Duration(pttl)
	}
	if c, ok := a[4].(string); ok {
		tok, err := fence.Parse(c)
		if err != nil {
			return bad("counter", err)
		}
		s.LastToken = tok
	}
	if (s.Owner == "") != (s.Token == fence.None) || (s.Owner == "") != (s.Depth == 0) {
		return bad("fields", errors.New("owner, count and token must be all present or all absent"))
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

// scriptErr turns the scripts' own error replies into typed errors and
// leaves every other error (network, NOSCRIPT after a failed fallback,
// OOM, READONLY...) wrapped as it came.
func scriptErr(err error) error {
	msg := err.Error()
	for _, p := range []struct {
		code string
		err  error
	}{{"WRONGTYPE ", ErrWrongType}, {"OVERFLOW ", ErrOverflow}} {
		if key, ok := strings.CutPrefix(msg, p.code); ok && !strings.HasPrefix(key, "Operation") {
			return fmt.Errorf("%w: %s", p.err, key)
		}
	}
	return err
}
