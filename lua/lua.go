// Package lua holds the Redis scripts behind redfence's locks (the .lua
// files of this directory, embedded) and the typed wrappers a caller of the
// scripts needs: [Acquire], [Release], [Extend], [Abandon], [Inspect] and
// [Force], on the keys [KeysFor] lays out. On Redis 7 the scripts are one
// library of Functions, loaded by the first call that finds it missing and
// called with FCALL; on a server without Functions each wrapper sends
// EVALSHA and falls back to EVAL when the server answers NOSCRIPT (after
// SCRIPT FLUSH or a restart). [Load] loads both ahead of use.
// docs/design.md ("Scripts") says what an operator sees in FUNCTION LIST.
//
// The scripts are the whole of the lock's server-side logic; each .lua
// file's header gives its KEYS, ARGV and every reply. A script refuses a
// key it did not write with [ErrForeign], and changes nothing. The lock
// client's own plumbing (the Redlock phases, the replica-acknowledged
// acquisition, the renewer's pipeline) runs the same scripts from an
// internal package.
package lua

import (
	"context"
	"embed"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
)

//go:embed *.lua
var sources embed.FS

func init() { scripts.Install(sources) }

var (
	// ErrForeign reports a key holding a value this module did not write
	// where it keeps its own: a lock's hash or wait queue, or a record of
	// storage/redisstore. Nothing was changed. The error names the key and
	// wraps the server's reply, so errors.As finds a redis.Error.
	ErrForeign = scripts.ErrForeign

	// ErrOverflow reports a next token at 2^53 or beyond, which the scripts
	// cannot represent exactly; the lock was not taken.
	ErrOverflow = scripts.ErrOverflow

	// ErrReply reports a script reply of an unexpected shape: a server that
	// is not Redis-compatible, or a script of another version.
	ErrReply = scripts.ErrReply
)

// Keys are the three keys of one lock, in one Cluster hash slot: Lock, the
// hash (holder, lease, last ownership); Queue, the Lock calls waiting;
// Counter, the highest token issued. Lay them out with KeysFor.
type Keys = scripts.Keys

// KeysFor returns the keys of the lock name under prefix: P:{N}, P:{N}:q
// and P:{N}:t, N escaped by HashTag. Distinct names give distinct keys.
func KeysFor(prefix, name string) Keys { return scripts.KeysFor(prefix, name) }

// HashTag returns s as a Redis Cluster hash tag, {s}, with %, { and }
// escaped (%25, %7B, %7D), so that every s has its own tag and no s can
// close the braces early.
func HashTag(s string) string { return scripts.HashTag(s) }

// Tokens says how the scripts issue a fresh token: with Time false (the
// zero value) the counter's next value; with Time true the larger of that
// and the server's clock in microseconds, the counter then expiring Idle
// after the last token issued.
type Tokens = scripts.Tokens

// Request is one acquisition: the owner, the level (one Lock call's ID),
// the lease, the metadata of a fresh ownership, the deepest reentry
// allowed, the queue entry (Waiter) when the call waits, and the Tokens.
type Request = scripts.Request

// Waiter describes a Lock call that waits in the lock's queue: where its
// client listens for the handoff, how long a handed lock waits to be
// claimed, and how long the queue outlives its last poll.
type Waiter = scripts.Waiter

// Acquired is the reply of Acquire: taken (OK, with the token and depth), a
// reentry refused at the depth limit (TooDeep), or neither (HolderTTL, what
// is left of the holder's lease).
type Acquired = scripts.Acquired

// Acquire runs acquire.lua: it takes the lock free, reenters it for r's
// owner, or, with r.Waiter, queues the call. It fails with ErrForeign or
// ErrOverflow when the script refuses (nothing changed), ErrReply on a
// malformed reply, or the server's error.
func Acquire(ctx context.Context, rdb redis.Scripter, k Keys, r *Request) (Acquired, error) {
	return scripts.Acquire(ctx, rdb, k, r)
}

// Release runs release.lua: it ends the level of owner's ownership with
// token, once however often it is sent, and returns the depth left, or -1
// when the ownership does not hold the lock. A lock handed to a waiter gets
// a token issued as m says.
func Release(ctx context.Context, rdb redis.Scripter, k Keys, owner string, token fence.Token, level string, m Tokens) (int64, error) {
	return scripts.Release(ctx, rdb, k, owner, token, level, m)
}

// Extend runs extend.lua: it sets the lease of owner's ownership with token
// to ttl from now, never shortening it, and reports whether the ownership
// holds the lock.
func Extend(ctx context.Context, rdb redis.Scripter, k Keys, owner string, token fence.Token, ttl time.Duration, m Tokens) (bool, error) {
	return scripts.Extend(ctx, rdb, k, owner, token, ttl, m)
}

// Abandon runs abandon.lua: it undoes r, a request whose outcome is unknown
// (its queue entry, or the level it took), and reports whether it undid a
// level.
func Abandon(ctx context.Context, rdb redis.Scripter, k Keys, r *Request) (bool, error) {
	return scripts.Abandon(ctx, rdb, k, r)
}

// State is a snapshot of one lock, read in one atomic step by Inspect.
type State = scripts.State

// Ended is an ownership the lock's hash records as ended (the last one
// while the lock is free, and the 16 most recent whose lease ran out): its
// token, its owner, and whether it expired or was forced.
type Ended = scripts.Ended

// Forced is the record a forced unlock (Force) leaves: the ownership it
// ended, when (the server's clock), and who forced it.
type Forced = scripts.Forced

// Inspect runs inspect.lua, which changes nothing.
func Inspect(ctx context.Context, rdb redis.Scripter, k Keys) (State, error) {
	return scripts.Inspect(ctx, rdb, k)
}

// ForceResult is the reply of Force: it ended the ownership (Ended), the
// ownership had been forced already (Repeat), or neither, and Holder is the
// token of the ownership that holds the lock (None: free).
type ForceResult = scripts.ForceResult

// Force runs force.lua: it ends the ownership with token tok, whoever holds
// it, records by as who forced it, and hands the lock to the oldest waiter.
func Force(ctx context.Context, rdb redis.Scripter, k Keys, tok fence.Token, by string, m Tokens) (ForceResult, error) {
	return scripts.Force(ctx, rdb, k, tok, by, m)
}

// Load puts every script into the script cache of rdb with SCRIPT LOAD
// (through a ClusterClient, of every node) and, on a server with Functions,
// loads the library (on every primary), so that the first call of each
// needs no load. It is optional: every wrapper loads what it needs by
// itself. It fails with the server's error, or ErrReply when the server
// names a script by another SHA1.
func Load(ctx context.Context, rdb redis.Scripter) error { return scripts.Load(ctx, rdb) }

// IsRefusal reports whether err is one of the scripts' own refusals
// (ErrForeign, ErrOverflow): the script ran, checked, and changed nothing.
func IsRefusal(err error) bool { return scripts.IsRefusal(err) }
