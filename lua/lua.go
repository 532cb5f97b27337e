// Package lua runs the Redis scripts behind redfence's locks, through
// typed wrappers: [Acquire] (and [AcquireAcked], which waits for replicas),
// [Release], [Extend] (and [ExtendBatch], many in one pipeline), [Abandon],
// [Inspect] and [Force], and for Redlock nodes [QAcquire], [QRaise] and
// [QBump], on the keys [KeysFor] lays out. Each wrapper sends EVALSHA
// and falls back to EVAL when the server answers NOSCRIPT (after SCRIPT
// FLUSH or a restart); [Load] puts every script into a server's cache
// ahead of use.
//
// The scripts are the whole of the lock's server-side logic; each .lua
// file's header gives its KEYS, ARGV and every reply. A script refuses a
// key it did not write with [ErrForeign], and changes nothing.
package lua

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/scripthook"
)

var (
	//go:embed lib.lua
	libSrc string
	//go:embed queue.lua
	queueSrc string
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
	//go:embed qacquire.lua
	qacquireSrc string
	//go:embed qraise.lua
	qraiseSrc string
	//go:embed force.lua
	forceSrc string
)

// helpers is what every script starts with: lib.lua (the lock hash, the
// tokens) and queue.lua (the wait queue), so the helpers that recognise a
// lock exist once.
var helpers = libSrc + queueSrc

// The scripts, loaded once per process: the helpers, then the script's own
// file.
var (
	acquireScript  = redis.NewScript(helpers + acquireSrc)
	releaseScript  = redis.NewScript(helpers + releaseSrc)
	extendScript   = redis.NewScript(helpers + extendSrc)
	inspectScript  = redis.NewScript(helpers + inspectSrc)
	abandonScript  = redis.NewScript(helpers + abandonSrc)
	qacquireScript = redis.NewScript(helpers + qacquireSrc)
	qraiseScript   = redis.NewScript(helpers + qraiseSrc)
	forceScript    = redis.NewScript(helpers + forceSrc)
)

// scripts names every script with its source, for Load and for the
// module's own tests, which reach them through internal/scripthook.
var scripts = []struct {
	name, src string
	s         **redis.Script
}{
	{"acquire", acquireSrc, &acquireScript},
	{"release", releaseSrc, &releaseScript},
	{"extend", extendSrc, &extendScript},
	{"inspect", inspectSrc, &inspectScript},
	{"abandon", abandonSrc, &abandonScript},
	{"qacquire", qacquireSrc, &qacquireScript},
	{"qraise", qraiseSrc, &qraiseScript},
	{"force", forceSrc, &forceScript},
}

func init() {
	for _, s := range scripts {
		scripthook.Register(s.name, helpers+s.src, s.s)
	}
}

// Load puts every script into the script cache of rdb with SCRIPT LOAD
// (through a ClusterClient, of every node), so that the first call of each
// is an EVALSHA that needs no EVAL fallback. It is optional: every wrapper
// falls back to EVAL by itself when the server answers NOSCRIPT. It fails
// with ErrReply if the server names a script by another SHA1 than the
// wrappers do.
func Load(ctx context.Context, rdb redis.Scripter) error {
	for _, s := range scripts {
		want := (*s.s).Hash()
		sha, err := (*s.s).Load(ctx, rdb).Result()
		if err != nil {
			return fmt.Errorf("lua: load %s.lua: %w", s.name, err)
		}
		if sha != want {
			return fmt.Errorf("%w: SCRIPT LOAD of %s.lua returned %q, want %s", ErrReply, s.name, sha, want)
		}
	}
	return nil
}

var (
	// ErrForeign reports a key holding a value this module did not write
	// where it keeps its own: a lock's hash or wait queue, or a record of
	// storage/redisstore. Nothing was changed. The error names the key and
	// wraps the server's reply, so errors.As finds a redis.Error.
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
