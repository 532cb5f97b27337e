package redfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
	"pgregory.net/rapid"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/internal/tuning"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
	"github.com/redfence/redfence/storage/redisstore"
	"github.com/redfence/redfence/storage/sqlstore"
)

// The state of one lock name N under the prefix P, as lua/lib.lua lays it
// out, and what the lock machine's model (lockModel) keeps of it:
//
//	key      field    written by                     read by                        lifetime
//	P:{N}    o        acquire, multi (a take);       every script (holdOf)          the hold: the key exists only
//	                  release, abandon, force,                                      while the lock is held, and
//	                  acquire, multi (a handoff)                                    its own expiry is the lease
//	P:{N}    t        as o: the ownership's token    release, extend, force,        the hold
//	                                                 proclaim (owner and token)
//	P:{N}    l:<id>   acquire, multi (take, reentry, release, abandon (the level    the hold; the level's release
//	                  repeat, claim); a handoff      named), inspect (Levels)       or undo deletes it
//	P:{N}    m        a take with metadata,          inspect, proclaim              the hold
//	                  proclaim
//	P:{N}    q        acquire, multi (a waiter       release, abandon, force        the hold
//	                  queued); a handoff             (read the queue only then)
//	P:{N}:q  members  acquire, multi (enqueue);      acquire, multi, inspect        while someone waits: its own
//	                  nextWaiter (ZPOPMIN); acquire, (Waiters)                      expiry, the longest queue time
//	                  abandon, multi (ZREM)                                         of its waiters
//	P:{N}:t  counter  strict tokens: every script    strict: release (a retry's     never expires; no script
//	                  that issues a token (INCR)     -2), inspect (LastToken);      deletes it
//	                                                 time: acquire, multi (MODE)
//	P:{S}:f  floor    time tokens (the default):     time: release (-2), inspect    a week after its last write
//	                  every script that issues       (LastToken); strict: a new
//	                  a token                        counter's check (MODE)
//	P:{N}:u  forced   force: "<token> <ms> <by>"     release, extend (say who),     until the forced lease would
//	                                                 force (a repeat), inspect      have ended
//
// A released or expired name leaves nothing but its counter (P:{N}:t, or
// its slot's floor P:{S}:f), and P:{N}:u while a forced unlock's record
// lives. The model is lockModel (the hold, the counter, the record) and the
// machine's queue (P:{N}:q); what the client that holds a lease knows of
// its ownership (ownRec) decides what Unlock says of a lease Redis no
// longer holds.

// propPrefix is the lock machines' key prefix, this process's own: the
// model says what the floor of a name's slot holds (lockModel.last), which
// another process's names of the slot would move on a shared server.
var propPrefix = fmt.Sprintf("rfprop-%x", rand.Uint64())

// propFloorIdle is how long reentrant's time-token floor outlives its last
// write (a week): the token mode of the machine's raw releases.
const propFloorIdle = 7 * 24 * time.Hour

// lockModel is what Redis should hold for the machine's name, by the table
// above.
type lockModel struct {
	owner int         // the holder; -1: free, and P:{N} does not exist
	depth int         // the hold's levels
	token fence.Token // the hold's token; None when free
	// last is the highest token issued for the name: what its counter
	// (P:{N}:t, strict) or its slot's floor (P:{S}:f) holds, which nothing
	// else moves during a case (the prefix is this process's, and one name
	// of a slot is used at a time). None before the case's first take.
	last fence.Token
	// forced is the token P:{N}:u records, while it lives; None otherwise.
	forced fence.Token
	// forcedSure is how long the record surely lives: it expires when the
	// forced lease would have ended, in real time (testenv.Mini's keys
	// expire as the wall clock passes too) or at an expire step, so past
	// this the model accepts it there or gone.
	forcedSure time.Time
	// heldSince is when the step that made the hold began: its lease ends
	// a claim time (20 s) at least after that.
	heldSince time.Time
}

// ownRec is an ownership as the client that holds it knows it (reentrant's
// local state), which decides what Unlock of one of its leases says once
// Redis no longer holds it.
type ownRec struct {
	owner int
	token fence.Token
	open  int  // its leases not yet unlocked
	ended bool // the client ended it: released, unconfirmed, lost, or its last lease unlocked
	// lost: ended as lost (ErrGone), because Redis said it was gone (an
	// Extend, a forced Unlock) or the owner's next ownership superseded it
	// while the client still counted it live.
	lost bool
}

// waiterRec is a Lock call waiting in the lock's queue, in a goroutine of
// its own; res receives its outcome.
type waiterRec struct {
	owner  int
	cancel context.CancelFunc
	res    chan waitResult
}

type waitResult struct {
	lease *reentrant.Lease
	err   error
}

type leaseRec struct {
	owner    int
	lease    *reentrant.Lease
	own      *ownRec
	live     bool // Redis holds the lease's level: Unlock must succeed
	unlocked bool // Unlock was called: its release may be re-sent (replay)
}

func (r *leaseRec) state() string {
	switch {
	case r.unlocked:
		return "unlocked"
	case r.live:
		return "live"
	}
	return "dead"
}

// propClients are a backend's lock clients, one per token mode, each on a
// prefix of its own (a prefix's clients share a mode).
type propClients struct{ time, strict *reentrant.Client }

// lockMachine drives several owners doing lock / reenter / unlock /
// try-lock / extend / expire / write to a fenced store, and an operator
// deleting the lock's keys or forcing it open, against one lock name, and
// compares every answer with lockModel.
type lockMachine struct {
	b      testenv.Backend
	c      *reentrant.Client
	strict bool           // the case's token mode: WithStrictTokens, or time tokens
	keys   scripts.Keys   // the name's
	tokens scripts.Tokens // c's token mode, for raw releases
	name   string
	owners []context.Context
	latest map[int]*ownRec // each owner's latest ownership
	leases []*leaseRec
	queue  []*waiterRec // the model's queue, oldest first
	m      lockModel
	hist   []string  // what the case did, for a failure's message
	start  time.Time // when the current step began

	store   *memory.Store // a fenced store every lease writes to
	highest fence.Token   // the model of store's highest accepted token
}

func newLockMachine(t *rapid.T, b testenv.Backend, cs propClients, owners int) *lockMachine {
	lm := &lockMachine{b: b, c: cs.time, name: fmt.Sprintf("prop-%d", time.Now().UnixNano()), latest: map[int]*ownRec{},
		m: lockModel{owner: -1}, store: memory.New(), start: time.Now()}
	prefix := propPrefix
	lm.tokens = scripts.NewTokens(true, propFloorIdle)
	if lm.strict = rapid.Bool().Draw(t, "strict"); lm.strict {
		lm.c, prefix, lm.tokens = cs.strict, propPrefix+"-strict", scripts.NewTokens(false, 0)
	}
	lm.keys = scripts.KeysFor(prefix, lm.name)
	for range owners {
		lm.owners = append(lm.owners, reentrant.WithOwner(context.Background(), reentrant.NewOwner()))
	}
	return lm
}

// refused reports an error of a lock call that did not get the lock:
// ErrNotAcquired, or ErrOutcomeUnknown when Redis did not confirm the
// undo of what the call's attempt may have taken within the cleanup
// budget (a stalled machine), after which it is undone in the background.
func refused(err error) bool {
	return errors.Is(err, reentrant.ErrNotAcquired) || errors.Is(err, reentrant.ErrOutcomeUnknown)
}

func (lm *lockMachine) acquire(t *rapid.T, try bool) {
	o := rapid.IntRange(0, len(lm.owners)-1).Draw(t, "owner")
	ctx := lm.owners[o]
	var (
		l   *reentrant.Lease
		err error
	)
	switch {
	case try:
		l, err = lm.c.TryLock(ctx, lm.name)
	case lm.m.owner == -1 || lm.m.owner == o:
		l, err = lm.c.Lock(ctx, lm.name)
	default:
		// Lock on a lock held by another owner waits; bound the wait.
		wctx, cancel := context.WithTimeout(ctx, 2*time.Millisecond)
		l, err = lm.c.Lock(wctx, lm.name)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock on a held lock ended with %v, want the deadline", err)
		}
	}
	if lm.m.owner != -1 && lm.m.owner != o {
		// Refused; or, should the machine stall past the cleanup budget,
		// an attempt still in flight: its outcome unknown and undone in
		// the background.
		if !refused(err) {
			t.Fatalf("owner %d got %v on a lock held by %d", o, err, lm.m.owner)
		}
		return
	}
	if err != nil {
		t.Fatalf("owner %d: %v", o, err)
	}
	if lm.m.owner == -1 {
		if l.Token() <= lm.m.last {
			t.Fatalf("fresh acquisition got token %d, not above the last issued %d", l.Token(), lm.m.last)
		}
		lm.m.owner, lm.m.depth, lm.m.token, lm.m.last, lm.m.heldSince = o, 1, l.Token(), l.Token(), lm.start
	} else {
		if l.Token() != lm.m.token {
			t.Fatalf("reentry got token %d, want the ownership's %d", l.Token(), lm.m.token)
		}
		lm.m.depth++
	}
	if l.Depth() != int64(lm.m.depth) {
		t.Fatalf("lease depth %d, model %d", l.Depth(), lm.m.depth)
	}
	lm.addLease(o, l)
	lm.hist = append(lm.hist, fmt.Sprintf("  acquired owner %d try=%v token %d depth %d level %s", o, try, l.Token(), l.Depth(), l.ID()))
}

// addLease records a lease granted to owner o: a level of its current
// ownership, or the first of a new one. The client ends the owner's
// earlier ownership, if it still counted it live, as lost (superseded).
func (lm *lockMachine) addLease(o int, l *reentrant.Lease) {
	own := lm.latest[o]
	if own == nil || own.ended || own.token != l.Token() {
		if own != nil && !own.ended {
			own.ended, own.lost = true, true
		}
		own = &ownRec{owner: o, token: l.Token()}
		lm.latest[o] = own
	}
	own.open++
	lm.leases = append(lm.leases, &leaseRec{owner: o, lease: l, own: own, live: true})
}

func (lm *lockMachine) pick(t *rapid.T) *leaseRec {
	if len(lm.leases) == 0 {
		t.Skip("no leases")
	}
	return rapid.SampledFrom(lm.leases).Draw(t, "lease")
}

// forcedState says whether the forced-unlock record of the ownership with
// token tok lives: forcedNo, forcedYes, or forcedMaybe once it may have
// expired (lockModel.forcedSure).
func (lm *lockMachine) forcedState(tok fence.Token) int {
	switch {
	case lm.m.forced == fence.None || lm.m.forced != tok:
		return forcedNo
	case time.Now().Before(lm.m.forcedSure):
		return forcedYes
	}
	return forcedMaybe
}

const (
	forcedNo = iota
	forcedYes
	forcedMaybe
)

// freeSince reports whether the name is free and no token was issued on
// its counter since tok: what release.lua answers -2 for.
func (lm *lockMachine) freeSince(tok fence.Token) bool {
	return lm.m.owner == -1 && lm.m.last == tok
}

// unlockWant is what Unlock of r answers by the model (as unlockAnswer
// names it), and alt another answer it may give (a forced record that may
// have expired), or "".
func (lm *lockMachine) unlockWant(r *leaseRec) (want, alt string) {
	switch {
	case r.unlocked:
		return "already unlocked", ""
	case r.live:
		return "nil", ""
	}
	// Redis no longer holds the lease. A forced unlock's record says so
	// first; a client that knew the ownership lost says it was lost;
	// otherwise a release that finds the name free with no token issued
	// since is taken for a retry whose first attempt released it, and
	// anything else is unconfirmed: never ErrLost.
	fallback := "release unconfirmed"
	switch {
	case r.own.lost:
		fallback = "lost before Unlock"
	case lm.freeSince(r.lease.Token()):
		fallback = "nil"
	}
	switch lm.forcedState(r.lease.Token()) {
	case forcedYes:
		return "forced unlock by", ""
	case forcedMaybe:
		return "forced unlock by", fallback
	}
	return fallback, ""
}

// unlockAnswer names Unlock's answer err as unlockWant does.
func unlockAnswer(err error) string {
	switch {
	case err == nil:
		return "nil"
	case !errors.Is(err, reentrant.ErrNotHeld):
	case errors.Is(err, reentrant.ErrLost):
		if strings.Contains(err.Error(), "lost before Unlock") {
			return "lost before Unlock"
		}
	default:
		for _, s := range []string{"forced unlock by", "release unconfirmed", "already unlocked"} {
			if strings.Contains(err.Error(), s) {
				return s
			}
		}
	}
	return "other: " + err.Error()
}

func (lm *lockMachine) unlock(t *rapid.T) {
	r := lm.pick(t)
	want, alt := lm.unlockWant(r)
	err := r.lease.Unlock(context.Background())
	got := unlockAnswer(err)
	lm.hist = append(lm.hist, fmt.Sprintf("  unlock owner %d token %d level %s (%s): %v", r.owner, r.lease.Token(), r.lease.ID(), r.state(), err))
	if got != want && (alt == "" || got != alt) {
		t.Fatalf("Unlock of a %s lease (owner %d token %d): %v; want %q (or %q)", r.state(), r.owner, r.lease.Token(), err, want, alt)
	}
	if r.unlocked {
		return
	}
	r.unlocked = true
	r.own.open--
	switch {
	case r.live:
		r.live = false
		if lm.m.depth--; lm.m.depth == 0 {
			r.own.ended = true
			lm.free()
			lm.handOff(t)
		}
	case got == "forced unlock by":
		if !r.own.ended {
			r.own.lost = true
		}
		r.own.ended = true
	default: // released by an earlier attempt (nil), unconfirmed, lost
		r.own.ended = true
	}
	if r.own.open == 0 {
		r.own.ended = true
	}
}

func (lm *lockMachine) extend(t *rapid.T) {
	r := lm.pick(t)
	err := r.lease.Extend(context.Background(), time.Minute)
	lm.hist = append(lm.hist, fmt.Sprintf("  extend owner %d token %d level %s (%s): %v", r.owner, r.lease.Token(), r.lease.ID(), r.state(), err))
	if r.live != (err == nil) {
		t.Fatalf("Extend of a lease (live=%v): %v", r.live, err)
	}
	if r.live {
		return
	}
	if !errors.Is(err, reentrant.ErrNotHeld) {
		t.Fatalf("Extend of a dead lease: %v, want ErrNotHeld", err)
	}
	if r.unlocked || r.own.ended {
		return // answered by the client: it knows the lease ended
	}
	// Redis said the ownership is gone, naming the forcer if it was forced.
	if f := lm.forcedState(r.lease.Token()); f == forcedYes && !strings.Contains(err.Error(), "forced unlock by") ||
		f == forcedNo && strings.Contains(err.Error(), "forced") {
		t.Fatalf("Extend of a dead lease (token %d, forced record %d): %v", r.lease.Token(), lm.m.forced, err)
	}
	r.own.ended, r.own.lost = true, true
}

// replay re-sends the release of a lease that was already unlocked, as
// go-redis does when the first attempt's reply was lost: at any later
// point, after whatever the owners did in between. It must change nothing
// (check compares the state), and be answered as release.lua promises: the
// depth left while the ownership holds other levels; the forced record
// while it lives; free (-2) while nobody took the name since; else -1.
func (lm *lockMachine) replay(t *rapid.T) {
	var done []*leaseRec
	for _, r := range lm.leases {
		if r.unlocked {
			done = append(done, r)
		}
	}
	if len(done) == 0 {
		t.Skip("nothing unlocked yet")
	}
	r := rapid.SampledFrom(done).Draw(t, "unlocked lease")
	l, tok := r.lease, r.lease.Token()
	got, err := scripts.Release(context.Background(), lm.b.Client, lm.keys, string(l.Owner()), tok, l.ID(), lm.tokens)
	lm.hist = append(lm.hist, fmt.Sprintf("  replay owner %d token %d level %s: %s, %v", r.owner, tok, l.ID(), releasedText(got), err))
	if err != nil {
		t.Fatalf("replayed release: %v", err)
	}
	want := scripts.Released{Depth: -1}
	var alt *scripts.Released
	if lm.m.owner == r.owner && lm.m.token == tok {
		want.Depth = int64(lm.m.depth)
	} else {
		fallback := scripts.Released{Depth: -1, Free: lm.freeSince(tok)}
		switch lm.forcedState(tok) {
		case forcedNo:
			want = fallback
		case forcedMaybe:
			alt = &fallback
			fallthrough
		default:
			want.Forced = &scripts.Forced{Token: tok}
		}
	}
	if !sameReleased(got, want) && (alt == nil || !sameReleased(got, *alt)) {
		t.Fatalf("replayed release of token %d level %s answered %s, want %s\nHIST %s",
			tok, l.ID(), releasedText(got), releasedText(want), strings.Join(lm.hist, "\nHIST "))
	}
}

func sameReleased(a, b scripts.Released) bool {
	return a.Depth == b.Depth && a.Free == b.Free && (a.Forced == nil) == (b.Forced == nil) &&
		(a.Forced == nil || a.Forced.Token == b.Forced.Token)
}

func releasedText(r scripts.Released) string {
	s := fmt.Sprintf("{depth %d", r.Depth)
	if r.Free {
		s += " free"
	}
	if r.Forced != nil {
		s += fmt.Sprintf(" forced %d", r.Forced.Token)
	}
	return s + "}"
}

// free is the model's lock freed: no hold, the counter and the record as
// they were.
func (lm *lockMachine) free() {
	lm.m.owner, lm.m.depth, lm.m.token = -1, 0, fence.None
}

// dead marks every lease no longer held by Redis: the hold is gone.
func (lm *lockMachine) dead() {
	for _, r := range lm.leases {
		r.live = false
	}
}

// expire makes the lease run out: miniredis's clock jumps past the TTL; on
// a real Redis the hold's key (its expiry is the lease) is given 1 ms, and
// the forced record too, which ends no later than the lease it forced, as
// if the time had passed.
func (lm *lockMachine) expire(t *rapid.T) {
	if lm.b.Mini != nil {
		// Past the lease, and short of the queue's own expiry.
		testenv.Advance(lm.b.Mini, time.Minute+time.Second)
	} else {
		ctx := context.Background()
		rdb := lm.b.Client
		was, err := rdb.HGet(ctx, lm.keys.Lock, "t").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("expire: %v", err)
		}
		if err := rdb.PExpire(ctx, lm.keys.Lock, time.Millisecond).Err(); err != nil {
			t.Fatalf("expire: %v", err)
		}
		if err := rdb.PExpire(ctx, lm.keys.Forced, time.Millisecond).Err(); err != nil {
			t.Fatalf("expire: %v", err)
		}
		// Gone, or taken by a waiter's poll since: the hold's token changed.
		if !testenv.Await(waitCeiling, func() bool {
			t, _ := rdb.HGet(ctx, lm.keys.Lock, "t").Result()
			return (was == "" || t != was) && rdb.Exists(ctx, lm.keys.Forced).Val() == 0
		}) {
			t.Fatalf("the hold (token %s) and the forced record did not expire within %v", was, waitCeiling)
		}
	}
	lm.dead()
	lm.free()
	lm.m.forced = fence.None
	lm.handOff(t)
}

// write puts a value in the fenced store with a lease's token, live or not:
// the store accepts it iff no later token wrote before, and a live lease's
// write, whose token is the highest issued, is never refused.
func (lm *lockMachine) write(t *rapid.T) {
	r := lm.pick(t)
	tok := r.lease.Token()
	err := lm.store.Put(context.Background(), "resource", []byte(r.lease.ID()), tok)
	lm.hist = append(lm.hist, fmt.Sprintf("  write owner %d token %d live=%v: %v", r.owner, tok, r.live, err))
	switch {
	case tok < lm.highest:
		if !errors.Is(err, fence.ErrStale) {
			t.Fatalf("write with token %d after %d: %v, want ErrStale", tok, lm.highest, err)
		}
	case err != nil:
		t.Fatalf("write with token %d (highest %d, live=%v): %v", tok, lm.highest, r.live, err)
	default:
		lm.highest = tok
	}
	if r.live && err != nil {
		t.Fatalf("a live lease's write was refused: %v", err)
	}
}

// delete is an operator's DEL of every key of the name (the hold, the
// queue, the forced record and, with time tokens, the strict counter the
// name does not have), what every Redis-lock tutorial shows for a stuck
// lock. The ownership is gone, and the token's counter is not: the floor
// is its slot's, not the name's, so the next ownership gets a higher token
// (acquire checks it). With the strict counter, the counter is the name's
// own key, which no operator may delete (a deleted counter restarts at 1,
// docs/design.md): it is kept.
// With waiters queued, their places would go too and their order with
// them; the model's queue cannot say what follows, so it is not done then.
func (lm *lockMachine) delete(t *rapid.T) {
	if len(lm.queue) > 0 {
		t.Skip("waiters queued")
	}
	keys := []string{lm.keys.Lock, lm.keys.Queue, lm.keys.Forced}
	if !lm.strict {
		keys = append(keys, lm.keys.Counter)
	}
	if err := lm.b.Client.Del(context.Background(), keys...).Err(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	lm.dead()
	lm.free()
	lm.m.forced = fence.None
}

// force is ForceUnlock: the holder's ownership ends, whoever holds it, the
// record of it is kept, and the lock goes to the oldest waiter with a
// fresh token.
func (lm *lockMachine) force(t *rapid.T) {
	tok, err := lm.c.ForceUnlock(context.Background(), lm.name, fence.None)
	lm.hist = append(lm.hist, fmt.Sprintf("  force: token %d, %v", tok, err))
	if lm.m.owner == -1 {
		if !errors.Is(err, reentrant.ErrNotHeld) {
			t.Fatalf("ForceUnlock of a free lock: %v, want ErrNotHeld", err)
		}
		return
	}
	if err != nil || tok != lm.m.token {
		t.Fatalf("ForceUnlock: token %d, %v; want the holder's %d", tok, err, lm.m.token)
	}
	// The record lives as long as the forced lease would have: a claim
	// time (20 s) at least after its hold was made.
	lm.m.forced, lm.m.forcedSure = tok, lm.m.heldSince.Add(15*time.Second)
	lm.dead()
	lm.free()
	lm.handOff(t)
}

// stop ends every waiter still queued when a case ends.
func (lm *lockMachine) stop() {
	for _, w := range lm.queue {
		w.cancel()
		<-w.res
	}
	lm.queue = nil
}

func (lm *lockMachine) check(t *rapid.T) {
	// A Lock that gave up (a bounded wait, a waiter that left) takes its
	// entry out of the queue in the background once CleanupBudget/2 has
	// passed, which a loaded machine reaches: the queue is compared once
	// it has settled, at most waitCeiling later (a leftover entry fails
	// there).
	lm.awaitWaiters(t)
	ctx := context.Background()
	st, err := lm.c.Inspect(ctx, lm.name)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	held := lm.m.owner != -1
	if st.Held != held || st.Depth != int64(lm.m.depth) || st.Token != lm.m.token || (st.Held && st.Token == fence.None) {
		bad = append(bad, "the hold")
	}
	if held {
		var levels []string
		for _, r := range lm.leases {
			if r.live {
				levels = append(levels, r.lease.ID())
			}
		}
		slices.Sort(levels)
		got := slices.Sorted(slices.Values(st.Levels))
		if reentrant.Owner(st.Owner) != mustOwner(lm.owners[lm.m.owner]) {
			bad = append(bad, "the owner")
		}
		if st.TTL <= 0 {
			bad = append(bad, "a held lock without a TTL")
		}
		if !slices.Equal(got, levels) {
			bad = append(bad, fmt.Sprintf("levels %q, live leases %q", got, levels))
		}
	} else if st.Owner != "" || st.TTL != 0 || st.Levels != nil || st.Meta != "" {
		// A free name reports no owner, no lease and no levels.
		bad = append(bad, "a free name shows a holder")
	}
	// LastToken is the counter (strict) or the floor of the slot, which
	// only this name moves during a case: the last token issued, once the
	// case took one.
	if lm.m.last != fence.None && st.LastToken != lm.m.last {
		bad = append(bad, fmt.Sprintf("last token %d, model %d", st.LastToken, lm.m.last))
	}
	switch f := lm.forcedState(lm.m.forced); {
	case f == forcedMaybe:
	case lm.m.forced == fence.None && st.Forced != nil:
		bad = append(bad, fmt.Sprintf("a forced record of token %d, none in the model", st.Forced.Token))
	case lm.m.forced != fence.None && (st.Forced == nil || st.Forced.Token != lm.m.forced):
		bad = append(bad, fmt.Sprintf("forced record %+v, model %d", st.Forced, lm.m.forced))
	}
	if !held && len(lm.queue) == 0 {
		// A released, expired, forced or deleted name leaves nothing but
		// its counter, and the forced record while it lives.
		exists := func(key string) bool { return lm.b.Client.Exists(ctx, key).Val() == 1 }
		if exists(lm.keys.Lock) || exists(lm.keys.Queue) {
			bad = append(bad, "a free name left its hold or its queue")
		}
		if exists(lm.keys.Counter) != (lm.strict && lm.m.last != fence.None) {
			bad = append(bad, fmt.Sprintf("strict counter present: %v (strict %v)", exists(lm.keys.Counter), lm.strict))
		}
		if f := lm.forcedState(lm.m.forced); f != forcedMaybe && exists(lm.keys.Forced) != (f == forcedYes) {
			bad = append(bad, "the forced record's key")
		}
	}
	if len(bad) > 0 {
		q := lm.b.Client.ZRange(ctx, lm.keys.Queue, 0, -1).Val()
		t.Fatalf("state %+v, model %+v, queue %q: %s\nHIST %s", st, lm.m, q, strings.Join(bad, "; "), strings.Join(lm.hist, "\nHIST "))
	}
	if st.Waiters != int64(len(lm.queue)) {
		t.Fatalf("%d waiters queued, model %d", st.Waiters, len(lm.queue))
	}
}

func mustOwner(ctx context.Context) reentrant.Owner {
	o, _ := reentrant.OwnerFrom(ctx)
	return o
}

// lockMachineBody is the lock machine: every action, or with only, just
// the named ones (and the check), for a hunt that needs a particular
// sequence to be likely. Each case draws its token mode.
func lockMachineBody(b testenv.Backend, cs propClients, only ...string) func(*rapid.T) {
	return func(t *rapid.T) {
		lm := newLockMachine(t, b, cs, rapid.IntRange(1, 4).Draw(t, "owners"))
		defer lm.stop()
		w := func(n string, f func(*rapid.T)) func(*rapid.T) {
			return func(t *rapid.T) {
				lm.start = time.Now()
				lm.hist = append(lm.hist, fmt.Sprintf("%s model-before %+v q%d", n, lm.m, len(lm.queue)))
				f(t)
			}
		}
		actions := map[string]func(*rapid.T){
			"wait":    w("wait", lm.wait),
			"leave":   w("leave", lm.leave),
			"lock":    w("lock", func(t *rapid.T) { lm.acquire(t, false) }),
			"trylock": w("trylock", func(t *rapid.T) { lm.acquire(t, true) }),
			"unlock":  w("unlock", lm.unlock),
			"extend":  w("extend", lm.extend),
			"replay":  w("replay", lm.replay),
			"expire":  w("expire", lm.expire),
			"write":   w("write", lm.write),
			"delete":  w("delete", lm.delete),
			"force":   w("force", lm.force),
			"":        lm.check,
		}
		if len(only) > 0 {
			for name := range actions {
				if name != "" && !slices.Contains(only, name) {
					delete(actions, name)
				}
			}
		}
		t.Repeat(actions)
	}
}

// newPropClients makes b's lock clients, closed when t ends.
func newPropClients(t *testing.T, b testenv.Backend) propClients {
	mk := func(prefix string, opts ...reentrant.ClientOption) *reentrant.Client {
		// Waiters poll every 10 ms, which is how they find a lock that
		// expired; a handed lock waits for its claim as long as the case
		// may need.
		c, err := reentrant.New(b.Client, append([]reentrant.ClientOption{reentrant.WithPrefix(prefix),
			reentrant.WithTTL(time.Minute), reentrant.WithoutRenewal(),
			tuning.HandoffTimeout(40 * time.Second).(reentrant.ClientOption), tuning.MaxRetryDelay(10 * time.Millisecond).(reentrant.ClientOption),
			tuning.RetryJitter(2 * time.Millisecond).(reentrant.ClientOption)}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	return propClients{time: mk(propPrefix), strict: mk(propPrefix+"-strict", reentrant.WithStrictTokens())}
}

// The property tests run in parallel (t.Parallel), two at a time, after
// the package's other tests: the planted bugs (mutant) are gone by then,
// each machine has its own keys, and withChecks sets no flag.
func TestLockProperties(t *testing.T) {
	t.Parallel()
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		t.Parallel()
		factor := 8 // miniredis: fast, many cases
		if b.Mini == nil {
			factor = 2
		}
		body := lockMachineBody(b, newPropClients(t, b))
		withChecks(t, factor, func() { rapid.Check(t, body) })
	})
}

// wait starts a Lock by an owner that neither holds the lock nor waits for
// it, while another owner holds it: the call joins the queue.
func (lm *lockMachine) wait(t *rapid.T) {
	if lm.m.owner == -1 {
		t.Skip("free: Lock would not wait")
	}
	var idle []int
	for o := range lm.owners {
		if o != lm.m.owner && !slices.ContainsFunc(lm.queue, func(w *waiterRec) bool { return w.owner == o }) {
			idle = append(idle, o)
		}
	}
	if len(idle) == 0 {
		t.Skip("every other owner waits already")
	}
	o := rapid.SampledFrom(idle).Draw(t, "waiter")
	if lm.b.Mini != nil {
		// The queue orders waiters by the server's TIME when they join, and
		// Redis's clock moves on between two scripts. miniredis's stands
		// still once an expire has pinned it (testenv.Advance), and waiters
		// that join at one time are ordered by their level IDs instead,
		// which a client's sequence puts out of order where it gains a
		// digit: so the clock moves on here as Redis's would.
		testenv.Advance(lm.b.Mini, time.Millisecond)
	}
	ctx, cancel := context.WithCancel(lm.owners[o])
	w := &waiterRec{owner: o, cancel: cancel, res: make(chan waitResult, 1)}
	go func() {
		l, err := lm.c.Lock(ctx, lm.name)
		w.res <- waitResult{l, err}
	}()
	lm.queue = append(lm.queue, w)
	lm.awaitWaiters(t)
}

// leave ends a waiter's context: its Lock fails and it leaves the queue.
func (lm *lockMachine) leave(t *rapid.T) {
	if len(lm.queue) == 0 {
		t.Skip("nobody waits")
	}
	i := rapid.IntRange(0, len(lm.queue)-1).Draw(t, "leaving waiter")
	w := lm.queue[i]
	lm.hist = append(lm.hist, fmt.Sprintf("  leave owner %d", w.owner))
	lm.queue = slices.Delete(lm.queue, i, i+1)
	w.cancel()
	if r := lm.result(t, w); !refused(r.err) {
		t.Fatalf("a waiter whose context ended got %v, want ErrNotAcquired", r.err)
	}
	lm.awaitWaiters(t)
}

// handOff is what the model does when the lock becomes free: the oldest
// waiter gets it, with the next token, at depth 1.
func (lm *lockMachine) handOff(t *rapid.T) {
	if len(lm.queue) == 0 {
		return
	}
	w := lm.queue[0]
	lm.queue = lm.queue[1:]
	r := lm.resultFirst(t, w)
	if r.err != nil {
		t.Fatalf("the oldest waiter (owner %d) got %v, want the lock", w.owner, r.err)
	}
	if r.lease.Token() <= lm.m.last || r.lease.Depth() != 1 || r.lease.Owner() != mustOwner(lm.owners[w.owner]) {
		t.Fatalf("handoff gave owner %s token %d depth %d; want owner %d, a token above %d, depth 1",
			r.lease.Owner(), r.lease.Token(), r.lease.Depth(), w.owner, lm.m.last)
	}
	lm.m.owner, lm.m.depth, lm.m.token, lm.m.last, lm.m.heldSince = w.owner, 1, r.lease.Token(), r.lease.Token(), lm.start
	lm.hist = append(lm.hist, fmt.Sprintf("  handoff owner %d token %d level %s", w.owner, r.lease.Token(), r.lease.ID()))
	lm.addLease(w.owner, r.lease)
	lm.awaitWaiters(t)
}

// resultFirst waits for the oldest waiter w's outcome, failing at once if
// another queued waiter gets the lock first: the fairness invariant.
func (lm *lockMachine) resultFirst(t *rapid.T, w *waiterRec) waitResult {
	deadline := time.After(waitCeiling)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case r := <-w.res:
			return r
		case <-deadline:
			return lm.result(t, w) // reports the state
		case <-tick.C:
			for _, other := range lm.queue {
				select {
				case r := <-other.res:
					other.res <- r // for its own turn, or for stop when the case ends
					if r.err == nil {
						t.Fatalf("unfair handoff: the lock went to owner %d (token %d) while owner %d waited longer", other.owner, r.lease.Token(), w.owner)
					}
				default:
				}
			}
		}
	}
}

// waitCeiling bounds the waits for what a Lock call does next: it comes
// within a few polls (10 ms each), so 10 s means it never will, while a
// loaded machine's scheduler, which 3 s left little room, cannot take that
// long; a failing case's shrinking replays it, so it is not a minute.
const waitCeiling = 10 * time.Second

// result waits for a waiter's outcome, at most waitCeiling.
func (lm *lockMachine) result(t *rapid.T, w *waiterRec) waitResult {
	select {
	case r := <-w.res:
		return r
	case <-time.After(waitCeiling):
		st, err := lm.c.Inspect(context.Background(), lm.name)
		q := lm.b.Client.ZRange(context.Background(), lm.keys.Queue, 0, -1).Val()
		t.Fatalf("owner %d's Lock did not return; state %+v (%v), queue %q", w.owner, st, err, q)
		return waitResult{}
	}
}

// awaitWaiters waits until Redis's queue has the model's length: a Lock
// call queues, and a leaving one dequeues, a little after it starts or
// ends.
func (lm *lockMachine) awaitWaiters(t *rapid.T) {
	var st reentrant.State
	for end := time.Now().Add(waitCeiling); time.Now().Before(end); {
		var err error
		if st, err = lm.c.Inspect(context.Background(), lm.name); err != nil {
			t.Fatal(err)
		}
		if st.Waiters == int64(len(lm.queue)) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d waiters queued, model %d", st.Waiters, len(lm.queue))
}

// storeMachine sends the same random writes and reads to an adapter and to
// the in-memory reference, and requires the same answer from both: the same
// error class, value and token for every call.
type storeMachine struct {
	got, ref storage.Store
	ns       string // a key namespace unique to this case
	keys     []string
}

func (sm *storeMachine) key(t *rapid.T) string {
	return sm.ns + rapid.SampledFrom(sm.keys).Draw(t, "key")
}

// token draws mostly small tokens, so that equal and lower tokens are common,
// and sometimes zero or huge ones.
func drawToken(t *rapid.T) fence.Token {
	return fence.Token(rapid.OneOf(
		rapid.Uint64Range(0, 12),
		rapid.Uint64Range(1<<62, 1<<62+3),
	).Draw(t, "token"))
}

func errClass(err error) string {
	for _, c := range []struct {
		err  error
		name string
	}{{fence.ErrStale, "stale"}, {fence.ErrNoToken, "no-token"}, {storage.ErrNotFound, "not-found"}, {storage.ErrInvalid, "invalid"}} {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	if err != nil {
		return "other: " + err.Error()
	}
	return "ok"
}

func (sm *storeMachine) same(t *rapid.T, op string, got, ref error) {
	if errClass(got) != errClass(ref) {
		t.Fatalf("%s: adapter says %v, reference says %v", op, got, ref)
	}
	var gs, rs *fence.StaleError
	if errors.As(got, &gs) && errors.As(ref, &rs) && (gs.Token != rs.Token || gs.Highest != rs.Highest) {
		t.Fatalf("%s: adapter's stale error %+v, reference's %+v", op, *gs, *rs)
	}
}

func (sm *storeMachine) put(t *rapid.T) {
	k, tok := sm.key(t), drawToken(t)
	v := rapid.SliceOfN(rapid.Byte(), 0, 64).Draw(t, "value")
	ctx := context.Background()
	sm.same(t, fmt.Sprintf("Put(%q, %d)", k, tok), sm.got.Put(ctx, k, v, tok), sm.ref.Put(ctx, k, v, tok))
}

func (sm *storeMachine) del(t *rapid.T) {
	k, tok := sm.key(t), drawToken(t)
	ctx := context.Background()
	sm.same(t, fmt.Sprintf("Delete(%q, %d)", k, tok), sm.got.Delete(ctx, k, tok), sm.ref.Delete(ctx, k, tok))
}

func (sm *storeMachine) get(t *rapid.T) {
	k := sm.key(t)
	ctx := context.Background()
	g, gerr := sm.got.Get(ctx, k)
	r, rerr := sm.ref.Get(ctx, k)
	sm.same(t, fmt.Sprintf("Get(%q)", k), gerr, rerr)
	if gerr == nil && (string(g.Value) != string(r.Value) || g.Token != r.Token) {
		t.Fatalf("Get(%q): adapter %q@%d, reference %q@%d", k, g.Value, g.Token, r.Value, r.Token)
	}
}

func (sm *storeMachine) highest(t *rapid.T) {
	k := sm.key(t)
	ctx := context.Background()
	g, gerr := sm.got.Highest(ctx, k)
	r, rerr := sm.ref.Highest(ctx, k)
	sm.same(t, fmt.Sprintf("Highest(%q)", k), gerr, rerr)
	if g != r {
		t.Fatalf("Highest(%q): adapter %d, reference %d", k, g, r)
	}
}

// storeMachineBody runs one case against the adapter s. Keys include bytes
// that need escaping in Redis tags and cannot live in PostgreSQL text.
func storeMachineBody(s storage.Store) func(*rapid.T) {
	n := 0
	return func(t *rapid.T) {
		n++
		sm := &storeMachine{got: s, ref: memory.New(), ns: fmt.Sprintf("%d/", n),
			keys: []string{"a", "b", "{c}", "d\x00e", "%7B"}}
		t.Repeat(map[string]func(*rapid.T){
			"put":     sm.put,
			"delete":  sm.del,
			"get":     sm.get,
			"highest": sm.highest,
		})
	}
}

func TestStoreProperties(t *testing.T) {
	t.Parallel() // see TestLockProperties
	t.Run("redisstore/miniredis", func(t *testing.T) {
		_, rdb := testenv.Mini(t)
		s, err := redisstore.New(rdb, redisstore.WithPrefix("rfprop"))
		require.NoError(t, err)
		body := storeMachineBody(s) // one body for every run: it names each case apart
		withChecks(t, 4, func() { rapid.Check(t, body) })
	})
	t.Run("redisstore/redis", func(t *testing.T) {
		s, err := redisstore.New(testenv.Redis(t), redisstore.WithPrefix("rfprop:"+testenv.Unique(t)))
		require.NoError(t, err)
		body := storeMachineBody(s)
		withChecks(t, 2, func() { rapid.Check(t, body) })
	})
	t.Run("sqlstore/sqlite", func(t *testing.T) {
		s := sqlStore(t, "sqlite", sqlstore.SQLiteDSN(filepath.Join(t.TempDir(), "prop.db")), sqlstore.SQLite)
		body := storeMachineBody(s)
		withChecks(t, 2, func() { rapid.Check(t, body) })
	})
	t.Run("sqlstore/postgres", func(t *testing.T) {
		s := sqlStore(t, "pgx", testenv.PostgresURL(t), sqlstore.Postgres)
		body := storeMachineBody(s)
		withChecks(t, 2, func() { rapid.Check(t, body) })
	})
	t.Run("sqlstore/mysql", func(t *testing.T) {
		s := sqlStore(t, "mysql", testenv.MySQLDSN(t), sqlstore.MySQL)
		body := storeMachineBody(s)
		withChecks(t, 2, func() { rapid.Check(t, body) })
	})
}

// sqlStore opens a store of dialect d on a table of the test's own, dropped
// when the test ends.
func sqlStore(t *testing.T, driver, dsn string, d sqlstore.Dialect) *sqlstore.Store {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := sqlstore.New(db, d, sqlstore.WithTable(testenv.SQLTable(t, driver, dsn, "prop")))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(t.Context()))
	return s
}

// acceptsStale is a deliberately broken store: it ignores the fence on Put,
// as a store that checks and writes in two steps would under a race.
type acceptsStale struct{ *memory.Store }

func (s acceptsStale) Put(ctx context.Context, key string, value []byte, tok fence.Token) error {
	if err := s.Store.Put(ctx, key, value, tok); errors.Is(err, fence.ErrStale) {
		h, _ := s.Highest(ctx, key)
		_ = s.Delete(ctx, key, h)
		return s.Store.Put(ctx, key, value, h)
	}
	return nil
}

func TestStorePropertiesCatchStaleAcceptingStore(t *testing.T) {
	rec := mustFail(t, "MutantStoreAcceptsStale")
	rapid.Check(rec, storeMachineBody(acceptsStale{memory.New()}))
	// A write the reference refuses must be refused: the mutant lets a
	// refused write through (a stale token, or the zero token it passes on).
	rec.caught(t, regexp.MustCompile(`adapter says <nil>, reference says .*(stale token|zero token)`),
		"the store machine accepted a store that takes stale writes")
}
