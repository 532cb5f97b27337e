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

// Keys are the three keys of one lock, all in one Cluster hash slot. Lay
// them out with KeysFor.
type Keys struct {
	Name    string // N, the lock's name
	Lock    string // P:{N}, the lock's hash: the holder, its lease, the last ownership
	Queue   string // P:{N}:q, the Lock calls waiting, oldest first
	Counter string // P:{N}:t, the fencing counter: the highest token issued
}

// KeysFor returns the keys of the lock name under prefix: P:{N}, P:{N}:q
// and P:{N}:t, N escaped by HashTag. Distinct names give distinct keys.
// It does not validate: the keys share one slot only for a non-empty name
// and a prefix free of braces (see reentrant.CheckName and CheckPrefix).
func KeysFor(prefix, name string) Keys {
	k := scripts.KeysFor(prefix, name)
	return Keys{Name: k.Name, Lock: k.Lock, Queue: k.Queue, Counter: k.Counter}
}

func (k Keys) internal() scripts.Keys {
	return scripts.Keys{Name: k.Name, Lock: k.Lock, Queue: k.Queue, Counter: k.Counter}
}

// HashTag returns s as a Redis Cluster hash tag, {s}, with %, { and }
// escaped (%25, %7B, %7D), so that every s has its own tag and no s can
// close the braces early.
func HashTag(s string) string { return scripts.HashTag(s) }

// Tokens says how the scripts issue a fresh token: at a free-to-held
// acquisition, and when a release or an undo hands the lock to a waiter.
// The zero value is the strict counter.
type Tokens struct {
	// Time makes a fresh token the larger of the counter + 1 and the
	// server's clock in microseconds, so that a lost counter does not
	// restart tokens at 1; the counter then expires Idle after the last
	// token issued. Without it the counter never expires.
	Time bool
	// Idle is, with Time, how long the counter outlives the last token
	// issued; rounded down to milliseconds, at least 1 ms.
	Idle time.Duration
}

// Request is one acquisition, as Acquire and Abandon send it.
type Request struct {
	// Owner is who takes or reenters the lock; not empty.
	Owner string
	// Level is the ID of this level of the hold: one Lock call's ID,
	// unique per call. Release and Abandon name it.
	Level string
	// TTL is the lease; whole milliseconds.
	TTL time.Duration
	// Meta is the metadata of a fresh ownership, "" for none; no newline.
	Meta string
	// MaxDepth is the deepest hold a reentry may make; 0: no limit.
	MaxDepth int64
	// Waiter, when not nil, queues the call if it does not get the lock.
	Waiter *Waiter
	// Tokens says how a fresh token is issued.
	Tokens Tokens
	// Again marks an attempt of a waiting call after its first: an earlier
	// one may have queued it, so a reentry or a fresh take also removes
	// its queue entry.
	Again bool
}

func (r *Request) internal() *scripts.Request {
	out := &scripts.Request{Owner: r.Owner, Level: r.Level, TTL: r.TTL, Meta: r.Meta, MaxDepth: r.MaxDepth,
		Tokens: scripts.Tokens(r.Tokens), Again: r.Again}
	if r.Waiter != nil {
		w := scripts.Waiter(*r.Waiter)
		out.Waiter = &w
	}
	return out
}

// Waiter describes a Lock call that waits in the lock's queue. When the
// lock is freed and this waiter is the oldest, the lock is handed to it and
// "<level ID> <token>" is published on Channel (its client listens there;
// not empty), with SPUBLISH instead of PUBLISH when Sharded (Redis 7: on a
// Cluster the message goes to the lock's shard alone, and Channel must hash
// to the lock's slot). The waiter then has Claim to claim it, by Acquire
// with its level ID, before it passes on. The queue outlives its last poll
// by Queue.
type Waiter struct {
	Channel string
	Claim   time.Duration
	Queue   time.Duration
	Sharded bool
}

// Acquired is the reply of Acquire: taken (OK, with the token and depth), a
// reentry refused at the depth limit (TooDeep), or neither (HolderTTL).
type Acquired struct {
	OK        bool          // the caller holds the lock now
	TooDeep   bool          // a reentry refused: the hold is at Request.MaxDepth already
	Token     fence.Token   // the ownership's token, when OK or TooDeep
	Depth     int64         // the reentry depth, when OK or TooDeep
	HolderTTL time.Duration // what is left of the holder's lease when neither
}

// Acquire runs acquire.lua: it takes the lock free, reenters it for r's
// owner, or, with r.Waiter, queues the call. It fails with ErrForeign or
// ErrOverflow when the script refuses (nothing changed), ErrReply on a
// malformed reply, or the server's error.
func Acquire(ctx context.Context, rdb redis.Scripter, k Keys, r *Request) (Acquired, error) {
	a, err := scripts.Acquire(ctx, rdb, k.internal(), r.internal())
	return Acquired(a), err
}

// Release runs release.lua: it ends the level of owner's ownership with
// token, once however often it is sent, and returns the depth left, or -1
// when the ownership does not hold the lock. A lock handed to a waiter gets
// a token issued as m says.
func Release(ctx context.Context, rdb redis.Scripter, k Keys, owner string, token fence.Token, level string, m Tokens) (int64, error) {
	return scripts.Release(ctx, rdb, k.internal(), owner, token, level, scripts.Tokens(m))
}

// Extend runs extend.lua: it sets the lease of owner's ownership with token
// to ttl from now, never shortening it, and reports whether the ownership
// holds the lock.
func Extend(ctx context.Context, rdb redis.Scripter, k Keys, owner string, token fence.Token, ttl time.Duration, m Tokens) (bool, error) {
	return scripts.Extend(ctx, rdb, k.internal(), owner, token, ttl, scripts.Tokens(m))
}

// Abandon runs abandon.lua: it undoes r, a request whose outcome is unknown
// (its queue entry, or the level it took), and reports whether it undid a
// level.
func Abandon(ctx context.Context, rdb redis.Scripter, k Keys, r *Request) (bool, error) {
	return scripts.Abandon(ctx, rdb, k.internal(), r.internal())
}

// State is a snapshot of one lock, decoded from inspect.lua's reply (see
// its header), read in one atomic step.
type State struct {
	Name string // the lock's name, Keys.Name
	Held bool   // an ownership holds the lock
	// Owner, Depth and Token are the holder's: its owner, the number of
	// its Levels, its token; empty, 0 and None when the lock is free.
	// Token is None too while Pending: a Redlock hold on this node not
	// yet given its token (qacquire.lua).
	Owner   string
	Depth   int64
	Token   fence.Token
	Pending bool
	// TTL is what is left of the holder's lease; 0 when free.
	TTL time.Duration
	// Meta is the holder's Request.Meta; empty when free or none.
	Meta string
	// LastToken is the counter: the last token issued, None if none was
	// or a time-mode counter expired idle. LastOwner is the owner of the
	// last ownership (the holder's when held), empty if none.
	LastToken fence.Token
	LastOwner string
	// Levels are the level IDs of the hold, in no order; nil when free.
	Levels []string
	// Waiters is the length of the queue.
	Waiters int64
	// Ended are the ownerships the hash records as ended, lowest token
	// first; Forced is the last forced unlock; nil if none.
	Ended  []Ended
	Forced *Forced
}

// Ended is an ownership the lock's hash records as ended: the last one
// while the lock is free, and the 16 most recent whose lease ran out.
// Expired is set when its lease ran out or it was forced, Forced when
// Force ended it; neither when it was released.
type Ended struct {
	Token   fence.Token
	Owner   string
	Expired bool
	Forced  bool
}

// Forced is the record Force leaves: the token of the ownership it ended,
// when (the server's clock, to the millisecond), and who forced it.
type Forced struct {
	Token fence.Token
	At    time.Time
	By    string
}

// Inspect runs inspect.lua, which changes nothing.
func Inspect(ctx context.Context, rdb redis.Scripter, k Keys) (State, error) {
	s, err := scripts.Inspect(ctx, rdb, k.internal())
	if err != nil {
		return State{}, err
	}
	st := State{Name: s.Name, Held: s.Held, Owner: s.Owner, Depth: s.Depth, Token: s.Token, Pending: s.Pending,
		TTL: s.TTL, Meta: s.Meta, LastToken: s.LastToken, LastOwner: s.LastOwner, Levels: s.Levels, Waiters: s.Waiters}
	st.Ended, st.Forced = scripts.Records[Ended, Forced](s)
	return st, nil
}

// ForceResult is the reply of Force.
type ForceResult struct {
	// Ended is set when the ownership held the lock and this call ended it.
	Ended bool
	// Repeat is set when the ownership had been forced already (a retry).
	Repeat bool
	// Holder is the token of the ownership holding the lock when neither is
	// set; None when the lock is free.
	Holder fence.Token
}

// Force runs force.lua: it ends the ownership with token tok, whoever holds
// it, records by as who forced it, and hands the lock to the oldest waiter.
func Force(ctx context.Context, rdb redis.Scripter, k Keys, tok fence.Token, by string, m Tokens) (ForceResult, error) {
	r, err := scripts.Force(ctx, rdb, k.internal(), tok, by, scripts.Tokens(m))
	return ForceResult(r), err
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
