// Package scripts is the Go side of the lock scripts whose source is package
// lua's (the .lua files it embeds): the typed wrappers, the reply parsers,
// and a way in for the module's tests. The scripts are built from lua.FS
// when this package is initialised. The lock client (package reentrant)
// calls the wrappers: the single-node ones ([Acquire], [Release], ...),
// the Redlock phases ([QAcquire], [QRaise], [QBump]), the
// replica-acknowledged acquisition ([AcquireAcked]) and the renewer's
// pipelined [ExtendBatch]. Being internal, none of that is a promise to
// the module's users.
//
// Each wrapper sends FCALL of the Functions library where the server has
// Functions (functions.go), else EVALSHA, falling back to EVAL when the
// server answers NOSCRIPT (after SCRIPT FLUSH or a restart). A script
// refuses a key it did not write with [ErrForeign], and changes nothing.
package scripts

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/lua"
)

// The scripts, built once per process by install: the helpers the script
// calls (from lib.lua, the hold and the tokens; queue.lua, the wait
// queue; shared.lua, the read-write lock and the semaphore), then the script's own file, without comments (assemble), so the helpers that
// recognise a lock are written once.
var (
	acquireScript  *redis.Script
	releaseScript  *redis.Script
	extendScript   *redis.Script
	inspectScript  *redis.Script
	abandonScript  *redis.Script
	qacquireScript *redis.Script
	qraiseScript   *redis.Script
	forceScript    *redis.Script
	proclaimScript *redis.Script
	multiScript    *redis.Script
	sacquireScript *redis.Script
	sreleaseScript *redis.Script
	sinspectScript *redis.Script
)

type script struct {
	name  string
	s     **redis.Script // the variable the wrappers run
	src   string         // set by install
	hash  any            // (*s).Hash() as a command argument, made once
	fn    string         // its function in the library: redfence_<version>_<name>
	fnArg any            // fn as a command argument, made once
}

// scripts names every script with its source as the server runs it, for
// Load and for the module's tests (Source, Swap).
var scripts = []script{
	{name: "acquire", s: &acquireScript},
	{name: "release", s: &releaseScript},
	{name: "extend", s: &extendScript},
	{name: "inspect", s: &inspectScript},
	{name: "abandon", s: &abandonScript},
	{name: "qacquire", s: &qacquireScript},
	{name: "qraise", s: &qraiseScript},
	{name: "force", s: &forceScript},
	{name: "proclaim", s: &proclaimScript},
	{name: "multi", s: &multiScript},
	{name: "sacquire", s: &sacquireScript},
	{name: "srelease", s: &sreleaseScript},
	{name: "sinspect", s: &sinspectScript},
}

func init() { install(lua.FS) }

// install builds every script from the .lua files in src: lib.lua and
// queue.lua, shared.lua, then one file per script, named after it. init
// calls it with package lua's files, once, before any wrapper can run; a
// file missing from src is a build defect, and panics.
func install(src fs.FS) {
	read := func(name string) string {
		b, err := fs.ReadFile(src, name)
		if err != nil {
			panic("scripts: " + err.Error())
		}
		return string(b)
	}
	helpers := read("lib.lua") + read("queue.lua") + read("shared.lua")
	bodies := map[string]string{}
	for i := range scripts {
		s := &scripts[i]
		bodies[s.name] = read(s.name + ".lua")
		s.src = assemble(helpers, bodies[s.name])
		*s.s = redis.NewScript(s.src)
		s.hash = (*s.s).Hash()
	}
	buildLibrary(helpers, bodies)
}

// Load puts every script into the script cache of rdb with SCRIPT LOAD
// (through a ClusterClient, of every node), and the Functions library with
// FUNCTION LOAD where the server has Functions (on every primary), so that
// the first call of each needs no load. It is optional: every wrapper loads
// what it needs by itself. It fails with ErrReply if the server names a
// script by another SHA1 than the wrappers do, and with the server's error
// if it refuses the library for another reason than lacking Functions.
func Load(ctx context.Context, rdb redis.Scripter) error {
	for _, s := range scripts {
		want := (*s.s).Hash()
		sha, err := (*s.s).Load(ctx, rdb).Result()
		if err != nil {
			return fmt.Errorf("scripts: load %s.lua: %w", s.name, err)
		}
		if sha != want {
			return fmt.Errorf("%w: SCRIPT LOAD of %s.lua returned %q, want %s", ErrReply, s.name, sha, want)
		}
	}
	p, ok := rdb.(processor)
	if !ok {
		return nil
	}
	if err := load(ctx, rdb, p); err != nil {
		if noFunctions(err) {
			markWithout(rdb)
			return nil
		}
		return fmt.Errorf("scripts: load library %s: %w", lib.name, err)
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

	// ErrMode reports a name whose keys show the other token mode: a
	// time-token client met the name's strict counter, or a strict client
	// the floor of the name's slot. Clients of one prefix must share a
	// token mode; nothing was changed. The error names the key.
	ErrMode = errors.New("lua: the name's keys show the other token mode")

	// ErrShared reports a read-write lock's or a semaphore's refusal of
	// a call its state rules out: a reader's owner asking for the write
	// lease, or a count of permits other than the live semaphore's.
	// Nothing was changed.
	ErrShared = errors.New("lua: refused")

	// ErrReply reports a script reply of an unexpected shape: a server that
	// is not Redis-compatible, or a script of another version.
	ErrReply = errors.New("lua: malformed script reply")
)

// Tokens says how the scripts issue a fresh token: at a free-to-held
// acquisition, and when a release, an undo or a forced unlock hands the
// lock to a waiter. The zero value is the strict counter; NewTokens makes
// the mode a client uses, its ARGV made once.
type Tokens struct {
	// Time makes a fresh token max(counter + 1, the server's TIME in
	// microseconds), the counter being the floor of the name's slot
	// (Keys.Floor), which expires Idle after its last write; without it
	// the counter is the name's own (Keys.Counter), never expiring, and a
	// fresh token is counter + 1.
	Time bool
	// Idle is, with Time, how long the floor outlives its last write;
	// rounded down to milliseconds, at least 1 ms.
	Idle time.Duration

	text string // the ARGV, when made by NewTokens
}

// NewTokens returns the time-token mode with idle (see Tokens), or the
// strict counter when !time.
func NewTokens(time bool, idle time.Duration) Tokens {
	m := Tokens{Time: time, Idle: idle}
	m.text = m.format()
	return m
}

// arg is the scripts' token-mode ARGV (lib.lua): "0" for the strict
// counter, "<idle ms>" for time tokens.
func (m Tokens) arg() string {
	if m.text != "" {
		return m.text
	}
	return m.format()
}

func (m Tokens) format() string {
	if !m.Time {
		return "0"
	}
	return strconv.FormatInt(max(m.Idle.Milliseconds(), 1), 10)
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
	case err == nil: // HasErrorPrefix allocates even for nil
		return nil
	case redis.HasErrorPrefix(err, "FOREIGN"):
		return fmt.Errorf("%w: %w", ErrForeign, err)
	case redis.HasErrorPrefix(err, "OVERFLOW"):
		return fmt.Errorf("%w: %w", ErrOverflow, err)
	case redis.HasErrorPrefix(err, "MODE"):
		return fmt.Errorf("%w: %w", ErrMode, err)
	case redis.HasErrorPrefix(err, "UPGRADE"):
		return fmt.Errorf("%w: the owner holds a read lease: an upgrade would deadlock two readers (%w)", ErrShared, err)
	case redis.HasErrorPrefix(err, "PERMITS"):
		n := strings.TrimPrefix(err.Error(), "PERMITS ")
		return fmt.Errorf("%w: the semaphore is live with %s permits (%w)", ErrShared, n, err)
	}
	return err
}

// IsRefusal reports whether err is one of the scripts' own refusals
// (ErrForeign, ErrOverflow, ErrMode, ErrShared): the script ran, checked, and changed
// nothing.
func IsRefusal(err error) bool {
	return errors.Is(err, ErrForeign) || errors.Is(err, ErrOverflow) || errors.Is(err, ErrMode) || errors.Is(err, ErrShared)
}

// processor is a go-redis client or pipeline, which runs a command built
// by hand.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// run sends s, every script but the pipelines' (ExtendBatch and
// AcquireAcked, which do the same in pipelined and in their own), as FCALL where the server has Functions (see fcall), else
// as EVALSHA with argv, built by the caller as
// {nil, nil, len(keys), keys..., args...}, and EVAL with the source when
// the server answers NOSCRIPT (after SCRIPT FLUSH or a restart). The
// command is built in argv itself, one slice, where go-redis's Script.Run
// builds the keys, the arguments and the command each in slices of their
// own. A Scripter that cannot process a command (none of go-redis's) gets
// Script.Run.
func run(ctx context.Context, rdb redis.Scripter, s *redis.Script, argv []any) (any, error) {
	p, ok := rdb.(processor)
	if !ok {
		n := argv[2].(int)
		keys := make([]string, n)
		for i := range keys {
			keys[i] = argv[3+i].(string)
		}
		return s.Run(ctx, rdb, keys, argv[3+n:]...).Result()
	}
	in := installed(s)
	if in.fn != "" && hasFunctions(rdb) {
		if cmd, ok := fcall(ctx, p, rdb, in, argv); ok {
			return cmd.Result()
		}
	}
	argv[0], argv[1] = "evalsha", in.hash
	cmd := redis.NewCmd(ctx, argv...)
	_ = p.Process(ctx, cmd)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		argv[0], argv[1] = "eval", in.src
		cmd = redis.NewCmd(ctx, argv...)
		_ = p.Process(ctx, cmd)
	}
	return cmd.Result()
}

// installed returns the entry of s, a script install built.
func installed(s *redis.Script) *script {
	for i := range scripts {
		if *scripts[i].s == s {
			return &scripts[i]
		}
	}
	panic("scripts: a script not installed")
}

// sourceOf returns the source install built s from.
func sourceOf(s *redis.Script) string { return installed(s).src }
