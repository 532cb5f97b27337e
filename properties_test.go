package redfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
	"pgregory.net/rapid"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
	"github.com/redfence/redfence/storage/redisstore"
	"github.com/redfence/redfence/storage/sqlstore"
)

const propPrefix = "rfprop"

// lockModel is what the lock should look like: who holds it, how deep, with
// which token, and the last token ever issued.
type lockModel struct {
	owner int // -1: free
	depth int
	token fence.Token
	last  fence.Token // the highest token issued: the slot's floor is at least it
	shown fence.Token // the last token Inspect reports: last, or stowed once the hash was deleted
	// stowed is the token of the last ownership whose release stowed the
	// lock (its hash deleted, its record kept in a shared record hash,
	// which a DEL of the lock's keys leaves): what Inspect reports after
	// such a DEL. None while no release has stowed, and again once an
	// acquisition followed (its take marked the record taken).
	stowed fence.Token
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
	live     bool // the model says Unlock must succeed
	released bool // Unlock succeeded: its release may be re-sent
}

// lockMachine drives several owners doing lock / reenter / unlock /
// try-lock / extend / expire / write to a fenced store, and an operator
// deleting the lock's keys or forcing it open, against one lock name, and
// compares every answer with lockModel.
type lockMachine struct {
	b      testenv.Backend
	c      *reentrant.Client
	name   string
	owners []context.Context
	leases []*leaseRec
	queue  []*waiterRec // the model's queue, oldest first
	m      lockModel
	hist   []string // what the case did, for a failure's message

	store   *memory.Store // a fenced store every lease writes to
	highest fence.Token   // the model of store's highest accepted token
}

func newLockMachine(t *rapid.T, b testenv.Backend, c *reentrant.Client, owners int) *lockMachine {
	lm := &lockMachine{b: b, c: c, name: fmt.Sprintf("prop-%d", time.Now().UnixNano()), m: lockModel{owner: -1}, store: memory.New()}
	for range owners {
		lm.owners = append(lm.owners, reentrant.WithOwner(context.Background(), reentrant.NewOwner()))
	}
	return lm
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
		if !errors.Is(err, reentrant.ErrNotAcquired) {
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
		lm.m = lockModel{owner: o, depth: 1, token: l.Token(), last: l.Token(), shown: l.Token()}
	} else {
		if l.Token() != lm.m.token {
			t.Fatalf("reentry got token %d, want the ownership's %d", l.Token(), lm.m.token)
		}
		lm.m.depth++
	}
	if l.Depth() != int64(lm.m.depth) {
		t.Fatalf("lease depth %d, model %d", l.Depth(), lm.m.depth)
	}
	lm.leases = append(lm.leases, &leaseRec{owner: o, lease: l, live: true})
	lm.hist = append(lm.hist, fmt.Sprintf("  acquired owner %d try=%v token %d depth %d level %s", o, try, l.Token(), l.Depth(), l.ID()))
}

func (lm *lockMachine) pick(t *rapid.T) *leaseRec {
	if len(lm.leases) == 0 {
		t.Skip("no leases")
	}
	return rapid.SampledFrom(lm.leases).Draw(t, "lease")
}

func (lm *lockMachine) unlock(t *rapid.T) {
	r := lm.pick(t)
	err := r.lease.Unlock(context.Background())
	lm.hist = append(lm.hist, fmt.Sprintf("  unlock owner %d token %d level %s: %v", r.owner, r.lease.Token(), r.lease.ID(), err))
	if !r.live {
		if !errors.Is(err, reentrant.ErrNotHeld) {
			t.Fatalf("Unlock of a dead lease: %v, want ErrNotHeld", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Unlock of a live lease: %v", err)
	}
	r.live, r.released = false, true
	if lm.m.depth--; lm.m.depth == 0 {
		ended := lm.m.token
		lm.m.owner, lm.m.token = -1, fence.None
		lm.handOff(t)
		// Released with nothing else to keep, the lock is stowed: the
		// model follows the script's choice, which Inspect then shows.
		if lm.m.owner == -1 && lm.b.Client.Exists(context.Background(), scripts.SharedKeysFor(propPrefix, lm.name).Lock).Val() == 0 {
			lm.m.stowed = ended
		}
	}
}

func (lm *lockMachine) extend(t *rapid.T) {
	r := lm.pick(t)
	err := r.lease.Extend(context.Background(), time.Minute)
	if r.live != (err == nil) {
		t.Fatalf("Extend of a lease (live=%v): %v", r.live, err)
	}
	if !r.live && !errors.Is(err, reentrant.ErrNotHeld) {
		t.Fatalf("Extend of a dead lease: %v, want ErrNotHeld", err)
	}
}

// replay re-sends the release of a lease that was already unlocked, as
// go-redis does when the first attempt's reply was lost: at any later
// point, after whatever the owners did in between. It must change nothing.
func (lm *lockMachine) replay(t *rapid.T) {
	var done []*leaseRec
	for _, r := range lm.leases {
		if r.released {
			done = append(done, r)
		}
	}
	if len(done) == 0 {
		t.Skip("nothing released yet")
	}
	l := rapid.SampledFrom(done).Draw(t, "released lease").lease
	n, err := scripts.Release(context.Background(), lm.b.Client, scripts.SharedKeysFor(propPrefix, lm.name),
		string(l.Owner()), l.Token(), l.ID(), scripts.Tokens{})
	if err != nil {
		t.Fatalf("replayed release: %v", err)
	}
	if n < -1 {
		t.Fatalf("replayed release answered %d", n)
	}
}

// expire makes the lease run out: miniredis's clock jumps past the TTL; on
// a real Redis the lease's end is moved to the past, as if it had run out
// (the hash's x, or the second field of a hold kept as a string).
func (lm *lockMachine) expire(t *rapid.T) {
	if lm.b.Mini != nil {
		// Past the lease, and short of the queue's own expiry.
		testenv.Advance(lm.b.Mini, time.Minute+time.Second)
	} else if err := lm.b.Client.Eval(context.Background(),
		`if redis.call('TYPE', KEYS[1]).ok == 'string' then
		   local t, rest = string.match(redis.call('GET', KEYS[1]), '^(%d+) %d+ (.*)$')
		   redis.call('SET', KEYS[1], t .. ' 1 ' .. rest, 'KEEPTTL')
		 elseif redis.call('HEXISTS', KEYS[1], 'x') == 1 then redis.call('HSET', KEYS[1], 'x', '1') end`,
		[]string{scripts.SharedKeysFor(propPrefix, lm.name).Lock}).Err(); err != nil && err.Error() != "redis: nil" {
		t.Fatalf("expire: %v", err)
	}
	for _, r := range lm.leases {
		r.live = false
	}
	lm.m.owner, lm.m.depth, lm.m.token = -1, 0, fence.None
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

// delete is an operator's DEL of the lock's keys (the hash and the queue),
// what every Redis-lock tutorial shows for a stuck lock. The ownership is
// gone, and the floor is not: the next ownership gets a higher token. The
// record of the last stowed ownership, a field of a shared hash, stays:
// Inspect shows it.
// With waiters queued, their places would go too and their order with
// them; the model's queue cannot say what follows, so it is not done then.
func (lm *lockMachine) delete(t *rapid.T) {
	if len(lm.queue) > 0 {
		t.Skip("waiters queued")
	}
	k := scripts.SharedKeysFor(propPrefix, lm.name)
	if err := lm.b.Client.Del(context.Background(), k.Lock, k.Queue).Err(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	for _, r := range lm.leases {
		r.live = false
	}
	lm.m.owner, lm.m.depth, lm.m.token, lm.m.shown = -1, 0, fence.None, lm.m.stowed
}

// force is ForceUnlock: the holder's ownership ends, whoever holds it, and
// the lock goes to the oldest waiter with a fresh token.
func (lm *lockMachine) force(t *rapid.T) {
	tok, err := lm.c.ForceUnlock(context.Background(), lm.name)
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
	for _, r := range lm.leases {
		r.live = false
	}
	lm.m.owner, lm.m.depth, lm.m.token = -1, 0, fence.None
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
	st, err := lm.c.Inspect(context.Background(), lm.name)
	if err != nil {
		t.Fatal(err)
	}
	held := lm.m.owner != -1
	if st.Held != held || st.Depth != int64(lm.m.depth) || st.Token != lm.m.token || st.LastToken != lm.m.shown || st.Floor < lm.m.last {
		q := lm.b.Client.ZRange(context.Background(), scripts.SharedKeysFor(propPrefix, lm.name).Queue, 0, -1).Val()
		t.Fatalf("state %+v, model %+v, queue %q\nHIST %s", st, lm.m, q, strings.Join(lm.hist, "\nHIST "))
	}
	if held && reentrant.Owner(st.Owner) != mustOwner(lm.owners[lm.m.owner]) {
		t.Fatalf("owner %s, model owner %d", st.Owner, lm.m.owner)
	}
	if held && st.TTL <= 0 {
		t.Fatalf("a held lock must carry a TTL, has %v", st.TTL)
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
// sequence to be likely.
func lockMachineBody(b testenv.Backend, c *reentrant.Client, only ...string) func(*rapid.T) {
	return func(t *rapid.T) {
		lm := newLockMachine(t, b, c, rapid.IntRange(1, 4).Draw(t, "owners"))
		defer lm.stop()
		w := func(n string, f func(*rapid.T)) func(*rapid.T) {
			return func(t *rapid.T) {
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

func propClient(t *testing.T, b testenv.Backend) *reentrant.Client {
	// Waiters poll every 10 ms, which is how they find a lock that expired;
	// a handed lock waits for its claim as long as the case may need.
	c, err := reentrant.New(b.Client, reentrant.WithPrefix(propPrefix),
		reentrant.WithTTL(time.Minute), reentrant.WithoutRenewal(),
		// The hash outlives every expire step's advance of the clock; a
		// delete step removes it.
		reentrant.WithRecordExpiry(24*time.Hour),
		reentrant.WithHandoffTimeout(40*time.Second), reentrant.WithMaxRetryDelay(10*time.Millisecond),
		reentrant.WithRetryJitter(2*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
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
		body := lockMachineBody(b, propClient(t, b))
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
	if r := lm.result(t, w); !errors.Is(r.err, reentrant.ErrNotAcquired) {
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
	lm.m = lockModel{owner: w.owner, depth: 1, token: r.lease.Token(), last: r.lease.Token(), shown: r.lease.Token()}
	lm.hist = append(lm.hist, fmt.Sprintf("  handoff owner %d token %d level %s", w.owner, r.lease.Token(), r.lease.ID()))
	lm.leases = append(lm.leases, &leaseRec{owner: w.owner, lease: r.lease, live: true})
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
		q := lm.b.Client.ZRange(context.Background(), scripts.SharedKeysFor(propPrefix, lm.name).Queue, 0, -1).Val()
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
