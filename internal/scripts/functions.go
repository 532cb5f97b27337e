package scripts

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// Redis 7 Functions. The scripts are also one library, loaded once per
// server with FUNCTION LOAD and called with FCALL: a script sent with
// EVALSHA runs its whole text at every call, so the closures of its
// helpers are made anew each time (~2.2 µs of an 11 µs acquire), where a
// library makes them once, when it is loaded.
//
// The library's name carries a version, the first 12 hex digits of its
// source's SHA1: redfence_<version>, with functions
// redfence_<version>_<script>. Two versions of the SDK running side by side
// (a rolling deploy) load and call two libraries; a library is never
// loaded with REPLACE, so one version never changes the code another calls.
//
// A call answered "Function not found" (a server that has not loaded this
// version: a new or restarted node, a failover to a replica that never
// had it, FUNCTION FLUSH) loads the library, on every primary of a
// Cluster, and is sent again. A server without Functions (before 7.0,
// miniredis, FUNCTION or FCALL renamed away or denied by an ACL) is
// remembered per client, which then sends EVALSHA as before.

// lib is the Functions library install built.
var lib struct {
	name string // redfence_<version>
	src  string // "#!lua name=..." and the code
}

// buildLibrary makes the library of helpers (lib.lua, queue.lua and shared.lua, every
// helper once) and one function per script, whose body runs as the
// callback's: its KEYS and ARGV are the callback's parameters.
func buildLibrary(helpers string, bodies map[string]string) {
	var code strings.Builder
	code.WriteString(strip(helpers))
	for _, s := range scripts {
		flags := ""
		if s.name == "inspect" || s.name == "sinspect" {
			flags = ", flags={'no-writes'}"
		}
		code.WriteString("redis.register_function{function_name='@_" + s.name + "'" + flags +
			", callback=function(KEYS, ARGV)\n" + strip(bodies[s.name]) + "end}\n")
	}
	sum := sha1.Sum([]byte(code.String()))
	name := "redfence_" + hex.EncodeToString(sum[:])[:12]
	lib.name = name
	lib.src = "#!lua name=" + name + "\n" + strings.ReplaceAll(code.String(), "'@_", "'"+name+"_")
	for i := range scripts {
		scripts[i].fn = name + "_" + scripts[i].name
		scripts[i].fnArg = scripts[i].fn
	}
}

// LibraryName is the name of the Functions library this build loads:
// redfence_<version>.
func LibraryName() string { return lib.name }

// without remembers the clients whose servers have no Functions (a
// *redis.Client, *redis.ClusterClient or *redis.Ring), held weakly: a
// client that is dropped takes its entry with it. A Conn passed through Via
// counts as the client it came from; other Scripters (a bare Conn, a
// pipeline) are not remembered, and try FCALL first each time. The map
// is read only once some client was found without Functions (anyWithout),
// so the common path pays no lookup.
var (
	without    sync.Map // weak.Pointer[T] -> struct{}
	anyWithout atomic.Bool
)

// onConn is a connection taken from a client (Via): it runs scripts as the
// connection, and is remembered as that client.
type onConn struct {
	*redis.Conn
	of redis.Scripter
}

// Via returns conn, taken from the client of, as a Scripter that the
// scripts remember as of: a server that of was found to lack Functions
// gets EVALSHA on conn at once, and one that conn finds without them marks
// of. A bare Conn is not remembered, so each call on it would try FCALL
// first (a waiter's polls under WithReplicaAck).
func Via(conn *redis.Conn, of redis.Scripter) redis.Scripter { return onConn{conn, of} }

// key returns rdb's key in without, nil for a Scripter not remembered.
func key(rdb redis.Scripter) any {
	switch c := rdb.(type) {
	case onConn:
		return key(c.of)
	case Batched:
		return key(c.Client)
	case *redis.Client:
		return weak.Make(c)
	case *redis.ClusterClient:
		return weak.Make(c)
	case *redis.Ring:
		return weak.Make(c)
	}
	return nil
}

// hasFunctions reports whether rdb may have Functions: false once it was
// found without.
func hasFunctions(rdb redis.Scripter) bool {
	if !anyWithout.Load() {
		return true
	}
	k := key(rdb)
	if k == nil {
		return true
	}
	_, no := without.Load(k)
	return !no
}

// markWithout remembers that rdb's servers have no Functions.
func markWithout(rdb redis.Scripter) {
	switch c := rdb.(type) {
	case onConn:
		markWithout(c.of)
	case Batched:
		markWithout(c.Client)
	case *redis.Client:
		remember(c)
	case *redis.ClusterClient:
		remember(c)
	case *redis.Ring:
		remember(c)
	}
}

func remember[T any](p *T) {
	k := weak.Make(p)
	if _, loaded := without.LoadOrStore(k, struct{}{}); !loaded {
		runtime.AddCleanup(p, func(k weak.Pointer[T]) { without.Delete(k) }, k)
	}
	anyWithout.Store(true)
}

// fcall runs the script of in as FCALL (FCALL_RO for a read-only one) with
// argv as run builds it, loading the library when the server lacks it.
// ok is false when the server has no Functions: the caller sends EVALSHA.
func fcall(ctx context.Context, p processor, rdb redis.Scripter, in *script, argv []any) (cmd *redis.Cmd, ok bool) {
	argv[0], argv[1] = "fcall", in.fnArg
	if in.name == "inspect" {
		argv[0] = "fcall_ro"
	}
	for attempt := 0; ; attempt++ {
		cmd = redis.NewCmd(ctx, argv...)
		_ = p.Process(ctx, cmd)
		err := cmd.Err()
		switch {
		case err == nil || !isRedisErr(err):
			return cmd, true
		case noFunctions(err):
			markWithout(rdb)
			return nil, false
		case functionMissing(err):
			if attempt > 0 {
				return nil, false // loaded, and still missing: EVALSHA this time
			}
			if lerr := load(ctx, rdb, p); lerr != nil {
				// A server that cannot load it now (OOM: FUNCTION LOAD is
				// refused where a script's reads still run; a replica)
				// gets this call as EVALSHA; one without Functions, every
				// call from now on.
				if noFunctions(lerr) {
					markWithout(rdb)
				}
				return nil, false
			}
		default:
			return cmd, true
		}
	}
}

// isRedisErr reports whether err is the server's error reply.
func isRedisErr(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && !errors.Is(err, redis.Nil)
}

// functionMissing reports whether err is the server's answer to an FCALL
// of a function it has not loaded.
func functionMissing(err error) bool {
	return err != nil && isRedisErr(err) && strings.HasPrefix(err.Error(), "ERR Function not found")
}

// noFunctions reports whether err says the server cannot run this
// library's functions at all: no FCALL or FUNCTION command (a server
// before 7.0, miniredis, a command renamed away) or one the user may not
// run (an ACL). An ACL's refusal of a key, or of a command inside a
// function that ran, is the call's own error: sending the call again as
// EVALSHA would run a script that may have written.
func noFunctions(err error) bool {
	msg := strings.ToLower(err.Error())
	if strings.Contains(msg, "script:") {
		return false // an error inside a function that ran (an ACL refusing one of its commands)
	}
	names := strings.Contains(msg, "fcall") || strings.Contains(msg, "function")
	return names && (strings.HasPrefix(msg, "err unknown command") || strings.HasPrefix(msg, "noperm"))
}

// load loads the library with FUNCTION LOAD (never REPLACE): on every
// primary through a ClusterClient, every shard through a Ring, else
// through p itself. A library already there (another client loaded it
// meanwhile) is success.
func load(ctx context.Context, rdb redis.Scripter, p processor) error {
	one := func(ctx context.Context, p processor) error {
		cmd := redis.NewStringCmd(ctx, "function", "load", lib.src)
		_ = p.Process(ctx, cmd)
		if err := cmd.Err(); err != nil && !strings.Contains(err.Error(), "already exists") {
			return err
		}
		return nil
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return one(ctx, n) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return one(ctx, n) })
	}
	return one(ctx, p)
}

// batch is the outcome of pipelined: for each entry, its command, the
// instant before the pipeline that carried its last attempt was sent, and
// what that pipeline's Exec returned (the first failed command's error,
// which stands for a command the pipeline never got to).
type batch struct {
	cmds  []*redis.Cmd
	sent  []time.Time
	execs []error
	tail  *redis.Cmd // the tail command of the last pipeline sent, if any
}

// pipelined runs the script of s once per entry, n of them, in pipelines
// on rdb: one round trip per Redis node (a Cluster or Ring client splits a
// pipeline by node itself). args(dst, i) appends entry i's arguments to
// dst, which holds the command and the script and has room for argc more:
// the key count, the keys, the ARGV. Like run, it
// sends FCALL where the server has Functions; the entries answered that
// the function is missing are sent again once the library is loaded, and
// those that still cannot run it go as EVALSHA, with EVAL for those
// answered NOSCRIPT. tail, when given, is a command sent at the end of
// every pipeline (AcquireAcked's WAIT, which must follow the script on its
// connection).
func pipelined(ctx context.Context, rdb redis.Cmdable, s *redis.Script, n, argc int, args func(dst []any, i int) []any, tail ...any) batch {
	b := batch{cmds: make([]*redis.Cmd, n), sent: make([]time.Time, n), execs: make([]error, n)}
	send := func(idx []int, cmd string, script any) {
		pipe := rdb.Pipeline()
		c := any(cmd) // boxed once, not per entry
		for _, i := range idx {
			b.cmds[i] = redis.NewCmd(ctx, args(append(make([]any, 0, 2+argc), c, script), i)...)
			_ = pipe.Process(ctx, b.cmds[i])
		}
		if len(tail) > 0 {
			b.tail = pipe.Do(ctx, tail...)
		}
		sent := time.Now()
		_, err := pipe.Exec(ctx)
		for _, i := range idx {
			b.sent[i], b.execs[i] = sent, err
		}
	}
	// answered returns the entries of idx whose reply err satisfies is.
	answered := func(idx []int, is func(error) bool) []int {
		var out []int
		for _, i := range idx {
			if err := b.cmds[i].Err(); err != nil && isRedisErr(err) && is(err) {
				out = append(out, i)
			}
		}
		return out
	}

	pending := make([]int, n)
	for i := range pending {
		pending[i] = i
	}
	in := installed(s)
	sc, scripter := rdb.(redis.Scripter)
	p, processes := rdb.(processor)
	if in.fn != "" && scripter && processes && hasFunctions(sc) {
		send(pending, "fcall", in.fnArg)
		if len(answered(pending, noFunctions)) > 0 {
			markWithout(sc)
		}
		if again := answered(pending, functionMissing); len(again) > 0 {
			if err := load(ctx, sc, p); err == nil {
				send(again, "fcall", in.fnArg)
			} else if noFunctions(err) {
				markWithout(sc)
			}
		}
		pending = answered(pending, func(err error) bool { return functionMissing(err) || noFunctions(err) })
	}
	if len(pending) > 0 {
		send(pending, "evalsha", in.hash)
		if again := answered(pending, func(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }); len(again) > 0 {
			send(again, "eval", in.src)
		}
	}
	return b
}
