// The lock workload: concurrent owners lock, reenter, unlock and release
// with wrong tokens, and write to a fenced store while they hold a name and
// after they gave it up. The network-fault and broken-variant tests reuse it.

package jepsen_test

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/mutant"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/internal/tuning"
	"github.com/redfence/redfence/jepsen/internal/history"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
)

// linLockWorld is what a lock run works on.
type linLockWorld struct {
	rdb       redis.UniversalClient // the lock's Redis, also for raw scripts
	store     storage.Store         // holders write their token here
	names     []string
	opTimeout time.Duration
	// release, when set, replaces the real release script for raw
	// releases: the hook for a deliberately broken lock.
	release func(ctx context.Context, k scripts.Keys, owner string, t fence.Token) (scripts.Released, error)
	// lockOpts are added to every worker's lock client's options.
	lockOpts []reentrant.ClientOption
	// sharedOwners makes workers act in pairs for one owner, each with its
	// own client and leases: the same owner reenters and releases from two
	// places at once, as when an owner is handed to a worker goroutine.
	sharedOwners bool
}

// linLockRun is the outcome of a lock run: the lock history and the history of
// the fenced writes the holders made.
type linLockRun struct {
	locks, writes *history.Recorder
}

// linRunLocks runs workers concurrent owners, each with its own
// reentrant.Client, for ops operations in all. Each owner locks, reenters,
// unlocks and try-locks random names, releases with wrong tokens, writes
// its token to the store while it holds a name and, later, with the token
// of an ownership it already gave up, as a paused holder would.
func linRunLocks(t *testing.T, w linLockWorld, workers, ops int) linLockRun {
	t.Helper()
	run := linLockRun{locks: history.NewRecorder(), writes: history.NewRecorder()}
	var budget atomic.Int64
	budget.Store(int64(ops))
	var wg sync.WaitGroup
	var owner reentrant.Owner
	for i := range workers {
		lc, err := reentrant.New(w.rdb, append([]reentrant.ClientOption{reentrant.WithTTL(linTTL),
			tuning.MaxRetryDelay(200 * time.Millisecond).(reentrant.ClientOption)}, w.lockOpts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lc.Close() })
		if !w.sharedOwners || i%2 == 0 {
			owner = reentrant.NewOwner()
		}
		k := &linWorker{w: &w, run: run, lc: lc, owner: owner, id: i,
			held: map[string]*linHolding{}, last: map[string]fence.Token{},
			rng: mrand.New(mrand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))}
		ctx, cancel := context.WithCancel(reentrant.WithOwner(t.Context(), k.owner))
		k.ctx = ctx
		// Leases live as long as the context they were taken with, so the
		// owner's context outlives every operation and ends with the run.
		t.Cleanup(cancel)
		wg.Go(func() {
			for budget.Add(-1) >= 0 {
				k.step()
			}
			k.windDown()
		})
	}
	wg.Wait()
	return run
}

// linHolding is what a worker knows of its hold on one name: the token and
// the leases it has (the levels it took; a worker sharing its owner does not
// see its partner's). A level an acquire of unknown outcome may have taken
// has no lease: the client undoes it, recorded as an Abandon.
type linHolding struct {
	token  fence.Token
	leases []*reentrant.Lease
}

// linWorker is one owner of a lock run, or one of two for the same owner;
// its process (history client) changes when an operation's outcome is
// unknown, its owner and its leases never do.
type linWorker struct {
	w      *linLockWorld
	run    linLockRun
	lc     *reentrant.Client
	owner  reentrant.Owner
	ctx    context.Context
	id     int
	hl, hw *history.Client
	held   map[string]*linHolding
	last   map[string]fence.Token // the latest token held per name
	rng    *mrand.Rand
	seq    int
}

func (k *linWorker) step() {
	if k.hl == nil || k.hl.Crashed() {
		// A new history process, the same owner and leases: an operation
		// of unknown outcome leaves its process unable to go on in the
		// history, not the worker.
		k.hl = k.run.locks.Client()
	}
	if k.hw == nil || k.hw.Crashed() {
		k.hw = k.run.writes.Client()
	}
	name := k.w.names[k.rng.IntN(len(k.w.names))]
	h := k.held[name]
	switch r := k.rng.IntN(100); {
	case r < 35 || r < 65 && h == nil:
		k.acquire(name)
	case r < 65:
		k.release(name, h)
	case r < 75:
		k.wrongRelease(name, h)
	case r < 90:
		k.write(name, h)
	default:
		ctx, cancel := context.WithTimeout(k.ctx, k.w.opTimeout)
		defer cancel()
		_, _ = k.hw.Get(ctx, k.w.store, name)
	}
}

// windDown releases every hold of the worker, so no other worker waits for
// an owner that has stopped.
func (k *linWorker) windDown() {
	for _, name := range k.w.names {
		for range 100 {
			h := k.held[name]
			if h == nil {
				break
			}
			if k.hl == nil || k.hl.Crashed() {
				k.hl = k.run.locks.Client()
			}
			k.release(name, h)
		}
	}
}

// acquire try-locks or reenters name; an owner that holds nothing may also
// wait for it. Waiting while holding another name could deadlock.
func (k *linWorker) acquire(name string) {
	ctx, cancel := context.WithCancel(k.ctx)
	timer := time.AfterFunc(k.w.opTimeout, cancel)
	var lease *reentrant.Lease
	var err error
	if len(k.held) == 0 && k.rng.IntN(3) == 0 {
		lease, err = k.hl.Lock(ctx, k.lc, name)
	} else {
		lease, err = k.hl.TryLock(ctx, k.lc, name)
	}
	// Stopped in time, the timer never cancels ctx and the lease lives on.
	if !timer.Stop() || err != nil {
		cancel()
	}
	if err != nil {
		return
	}
	h := k.held[name]
	if h == nil || h.token != lease.Token() {
		h = &linHolding{}
		k.held[name] = h
	}
	h.token = lease.Token()
	h.leases = append(h.leases, lease)
	k.last[name] = h.token
}

// release unlocks a random lease of the hold. When the outcome is unknown,
// the lease's level ID tells: Inspect (not recorded) shows whether the level
// is still there, and if so the lease is kept and unlocked again later, as
// every attempt names the same level and applies at most once.
func (k *linWorker) release(name string, h *linHolding) {
	// Long enough that go-redis, not the context, ends a failing Unlock:
	// then no attempt is still in flight when Inspect looks at the level.
	ctx, cancel := context.WithTimeout(k.ctx, 10*k.w.opTimeout)
	defer cancel()
	i := k.rng.IntN(len(h.leases))
	lease := h.leases[i]
	err := k.hl.Unlock(ctx, lease)
	switch {
	case err == nil:
	case errors.Is(err, reentrant.ErrNotHeld):
		delete(k.held, name)
		return
	default:
		if k.levelLive(name, lease) {
			return
		}
	}
	h.leases = append(h.leases[:i], h.leases[i+1:]...)
	if len(h.leases) == 0 {
		delete(k.held, name)
	}
}

// levelLive reports whether lease's level is still in the lock hash, asking
// for up to a second until Redis answers (a broken lock may never answer
// sensibly; its lease is then given up).
func (k *linWorker) levelLive(name string, lease *reentrant.Lease) bool {
	for range 100 {
		st, err := k.lc.Inspect(k.ctx, name)
		if err == nil {
			return reentrant.Owner(st.Owner) == lease.Owner() && st.Token == lease.Token() && slices.Contains(st.Levels, lease.ID())
		}
		if k.ctx.Err() != nil {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// wrongRelease releases name with a token this owner's current ownership
// was not granted, or, holding nothing, with the token of whoever holds
// it: the script must refuse both, because it checks owner and token.
func (k *linWorker) wrongRelease(name string, h *linHolding) {
	ctx, cancel := context.WithTimeout(k.ctx, k.w.opTimeout)
	defer cancel()
	var t fence.Token
	switch {
	case h != nil && h.token > 1 && k.rng.IntN(2) == 0:
		t = h.token - 1
	case h != nil:
		t = h.token + 1
	default:
		// Inspect is only a way to pick the input; it is not recorded.
		st, err := k.lc.Inspect(ctx, name)
		if err != nil {
			return
		}
		// A release with this owner, the token of its own ownership and a
		// level nobody took is answered as a repeat, so the token must be one
		// this owner cannot hold when the release lands: one already issued
		// (the holder's, or the last one). When the partner sharing this
		// owner holds it, or nothing was issued yet (the next token may go to
		// the partner), one far beyond anything this run issues.
		t = max(st.Token, st.LastToken)
		if t == fence.None || reentrant.Owner(st.Owner) == k.owner {
			t += 1 << 40
		}
	}
	_, _ = k.rawRelease(ctx, name, t)
}

// rawRelease runs the release script (or the broken one) as this owner and
// records it with the depth the script reports: a release that finds the
// ownership gone (-1, or -2: free, and no token issued since) is refused.
func (k *linWorker) rawRelease(ctx context.Context, name string, t fence.Token) (scripts.Released, error) {
	var n scripts.Released
	err := k.hl.Do(history.Release{Name: name, Owner: string(k.owner), Token: t}, func() (any, error) {
		var err error
		keys := scripts.KeysFor(scripts.DefaultPrefix, name)
		if k.w.release != nil {
			n, err = k.w.release(ctx, keys, string(k.owner), t)
		} else {
			// A level ID nobody took: a release with the wrong token is
			// refused before the level is looked at. The workers' clients
			// issue time tokens (the default).
			n, err = scripts.Release(ctx, k.w.rdb, keys, string(k.owner), t, linReqID(), linTimeTokens)
		}
		switch {
		case err != nil:
			return nil, err
		case n.Depth < 0:
			return history.ReleaseResult{}, nil
		}
		return history.ReleaseResult{Released: true, Depth: n.Depth}, nil
	})
	return n, err
}

// linTimeTokens is reentrant's default token mode, time tokens whose floor
// outlives its last write by a week, for raw script runs beside its
// clients.
var linTimeTokens = scripts.NewTokens(true, 7*24*time.Hour)

// write puts a fresh value under name with the token of the ownership this
// worker holds, or with the last token it held: a late write.
func (k *linWorker) write(name string, h *linHolding) {
	t := k.last[name]
	if h != nil {
		t = h.token
	}
	if t == fence.None {
		return
	}
	ctx, cancel := context.WithTimeout(k.ctx, k.w.opTimeout)
	defer cancel()
	k.seq++
	_ = k.hw.Put(ctx, k.w.store, name, fmt.Sprintf("w%d.%d@%d", k.id, k.seq, t), t)
}

// linLockNames returns two fresh lock names for t.
func linLockNames(t *testing.T) []string {
	n := testenv.Unique(t)
	return []string{n + "-a", n + "-b"}
}

// linMaxDepth returns the deepest reentry a lock history recorded.
func linMaxDepth(ops []porcupine.Operation) int64 {
	var d int64
	for _, op := range ops {
		if r, ok := op.Output.(history.AcquireResult); ok {
			d = max(d, r.Depth)
		}
	}
	return d
}

// TestLinearizableLock: concurrent owners locking, reentering,
// unlocking and releasing with wrong tokens and other owners' tokens, on
// miniredis and a real Redis, are linearizable against the reentrant fenced
// mutex; their fenced writes against the register.
func TestLinearizableLock(t *testing.T) {
	workers, ops := linScale()
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		w := linLockWorld{rdb: b.Client, store: linRedisStore(t, b.Client), names: linLockNames(t), opTimeout: 5 * time.Second}
		run := linRunLocks(t, w, workers, ops)
		n := linCheck(t, "lock", run.locks, history.LockModel())
		linCheck(t, "fenced writes", run.writes, history.RegisterModel())
		if n.Unknown != 0 || n.OK == 0 || n.Failed == 0 {
			t.Errorf("lock history %v: want no unknown outcome without faults, and both grants and refusals", n)
		}
		if d := linMaxDepth(run.locks.Operations()); d < 2 {
			t.Errorf("deepest reentry %d: the run never reentered", d)
		}
	})
}

// Deliberately broken variants of the store and the lock, each of which a
// checker must reject: the passing checks mean something only if these fail.
// linStaleStore is a deliberately broken store: a write its inner store
// refuses as stale is written anyway, under the highest token, and
// reported accepted.
type linStaleStore struct {
	storage.Store
	forged atomic.Int64 // stale writes let through
}

var _ storage.Store = (*linStaleStore)(nil)

// Put implements storage.Store, brokenly.
func (s *linStaleStore) Put(ctx context.Context, key string, value []byte, t fence.Token) error {
	err := s.Store.Put(ctx, key, value, t)
	var stale *fence.StaleError
	if !errors.As(err, &stale) {
		return err
	}
	s.forged.Add(1)
	return s.Store.Put(ctx, key, value, stale.Highest)
}

// linOwnerBlindRelease is a deliberately broken release script: it checks
// the token but not the owner. Tokens are numbers anyone can read
// (Inspect), so it lets any client release anyone's lock: it takes a level
// of the hold (lua/lib.lua's layout), and deletes the hold with the last.
var linOwnerBlindRelease = redis.NewScript(`
if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then return -1 end
local n, gone = 0, nil
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(f, 1, 2) == 'l:' then
    n = n + 1
    gone = gone or f
  end
end
if n > 1 then
  redis.call('HDEL', KEYS[1], gone)
  return n - 1
end
redis.call('DEL', KEYS[1])
return 0`)

// TestLinearizableCheckersCatchBrokenVariants runs each checker on a
// deliberately broken system and asserts that it reports a violation, so
// the passing checks above mean something.
func TestLinearizableCheckersCatchBrokenVariants(t *testing.T) {
	workers, ops := linScale()
	t.Run("store accepting stale tokens", func(t *testing.T) {
		s := &linStaleStore{Store: memory.New()}
		rec := linRunStore(t, s, workers, ops, 5*time.Second)
		r := history.NotLinearizable(t, history.RegisterModel(), rec.Operations(), linCheckTimeout)
		t.Logf("%v, %d stale writes let through; check %v", rec.Counts(), s.forged.Load(), r)
	})
	t.Run("release without owner check", func(t *testing.T) {
		// The victim's own Unlock then finds the name free with no token
		// issued since, which the release script takes for a repeat and
		// answers as done: the theft shows when another owner takes the
		// lock before the victim lets go. A run may miss that, so up to ten runs get the chance,
		// and the last one must be called illegal.
		for i := range 10 {
			_, c := testenv.Mini(t)
			w := linLockWorld{rdb: c, store: memory.New(), names: linLockNames(t), opTimeout: 5 * time.Second,
				release: func(ctx context.Context, k scripts.Keys, _ string, tok fence.Token) (scripts.Released, error) {
					n, err := linOwnerBlindRelease.Run(ctx, c, []string{k.Lock}, tok.String()).Int64()
					return scripts.Released{Depth: n}, err
				}}
			run := linRunLocks(t, w, workers, ops)
			ops := run.locks.Operations()
			if r := history.Check(history.LockModel(), ops, linCheckTimeout); r.Verdict == porcupine.Illegal || i == 9 {
				r = history.NotLinearizable(t, history.LockModel(), ops, linCheckTimeout)
				t.Logf("run %d: %v; check %v", i+1, run.locks.Counts(), r)
				return
			}
		}
	})
	t.Run("fencing counter reset", func(t *testing.T) {
		// As when maxmemory-policy allkeys-lru evicts the lock's keys, its
		// strict counter among them (WithStrictTokens: time tokens come
		// from the server's clock and restart above it, never at 1): the
		// next fresh acquisition starts again at token 1. A reset shows
		// only when another acquisition of that name follows it, which a
		// run on a loaded machine (a few resets in a fifth of a second)
		// may miss: up to ten runs get the chance, and the last one must
		// be called illegal.
		for i := range 10 {
			ops, resets := linCounterResetRun(t, workers, ops)
			if r := history.Check(history.LockModel(), ops, linCheckTimeout); r.Verdict == porcupine.Illegal || i == 9 {
				r = history.NotLinearizable(t, history.LockModel(), ops, linCheckTimeout)
				t.Logf("run %d: %d ops, %d counter resets; check %v", i+1, len(ops), resets, r)
				return
			}
		}
	})
}

// linCounterResetRun runs the lock workload with the strict counter on
// miniredis while a goroutine deletes each name's hold and counter
// whenever its last token reaches 2, and returns the history and how many
// resets it made.
func linCounterResetRun(t *testing.T, workers, ops int) ([]porcupine.Operation, int64) {
	_, c := testenv.Mini(t)
	w := linLockWorld{rdb: c, store: memory.New(), names: linLockNames(t), opTimeout: 5 * time.Second,
		lockOpts: []reentrant.ClientOption{reentrant.WithStrictTokens()}}
	done := make(chan struct{})
	var resets atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			for _, name := range w.names {
				// The last token issued is the strict counter's.
				k := scripts.KeysFor(scripts.DefaultPrefix, name)
				n, _ := strconv.Atoi(c.Get(context.Background(), k.Counter).Val())
				if n >= 2 {
					c.Del(context.Background(), k.Lock, k.Counter)
					resets.Add(1)
				}
			}
		}
	})
	run := linRunLocks(t, w, workers, ops)
	close(done)
	wg.Wait()
	return run.locks.Operations(), resets.Load()
}

// The queue workload: owners lock (waiting in the queue, polling), try-lock,
// reenter, release and give up waiting, each step one run of a lock script,
// and the history is checked against the lock model with its wait queue and
// direct handoff (history.QueueLockModel): waiters are served first come,
// first served, a release hands the lock to the oldest waiter, a TryLock
// never jumps the queue, and reentry never queues.
// linQueueWaiter is every waiter's queue entry: nobody listens on its
// channel (waiters poll), and a handed lock waits for its claim longer than
// any run, so that nothing expires and the model applies.
var linQueueWaiter = scripts.Waiter{Channel: "jepsen:nobody", Claim: linTTL, Queue: 2 * linTTL}

// linQueueRun runs workers owners on two names for ops script runs in all
// and returns the history. Each owner, holding nothing on a name, locks it
// (joining the queue and polling until it gets the lock or gives up, which
// leaves the queue) or try-locks it; holding it, it reenters or releases a
// level.
func linQueueRun(t *testing.T, rdb redis.Scripter, workers, ops int) *history.Recorder {
	t.Helper()
	rec := history.NewRecorder()
	names := linLockNames(t)
	var budget atomic.Int64
	budget.Store(int64(ops))
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			q := &linQueueWorker{rdb: rdb, rec: rec, hc: rec.Client(), owner: "q" + strconv.Itoa(i),
				rng: mrand.New(mrand.NewPCG(uint64(i), uint64(time.Now().UnixNano()))), held: map[string][]linLevel{}}
			for budget.Add(-1) >= 0 && !t.Failed() {
				q.step(t, names[q.rng.IntN(len(names))])
			}
			for _, name := range names {
				for len(q.held[name]) > 0 && !t.Failed() {
					q.release(t, name)
				}
			}
		})
	}
	wg.Wait()
	return rec
}

type linLevel struct {
	id    string
	token fence.Token
}

type linQueueWorker struct {
	rdb   redis.Scripter
	rec   *history.Recorder
	hc    *history.Client
	owner string
	rng   *mrand.Rand
	held  map[string][]linLevel // the levels this owner holds, per name
}

func (q *linQueueWorker) step(t *testing.T, name string) {
	if len(q.held[name]) == 0 {
		if q.rng.IntN(3) == 0 {
			q.acquire(t, name, linReqID(), false)
		} else {
			q.lock(t, name)
		}
		return
	}
	if q.rng.IntN(3) == 0 {
		q.acquire(t, name, linReqID(), false) // reentry
		return
	}
	time.Sleep(time.Duration(q.rng.IntN(3)) * time.Millisecond)
	q.release(t, name)
}

// lock joins the queue and polls until the lock is handed to this level,
// or gives up after a while and leaves.
func (q *linQueueWorker) lock(t *testing.T, name string) {
	level := linReqID()
	for range 40 {
		if q.acquire(t, name, level, true) {
			return
		}
		time.Sleep(time.Duration(1+q.rng.IntN(2)) * time.Millisecond)
	}
	in := history.QLeave{Name: name, Owner: q.owner, Level: level}
	err := q.hc.Do(in, func() (any, error) {
		removed, err := scripts.Abandon(context.Background(), q.rdb, scripts.KeysFor("jepsen-q", name), &scripts.Request{Owner: q.owner, Level: level, Waiter: &linQueueWaiter})
		return history.LeaveResult{Removed: removed}, err
	})
	if err != nil {
		t.Errorf("leave: %v", err)
	}
}

// acquire runs the acquire script once for level and reports whether this
// owner holds it afterwards.
func (q *linQueueWorker) acquire(t *testing.T, name, level string, wait bool) bool {
	var w *scripts.Waiter
	if wait {
		w = &linQueueWaiter
	}
	var a scripts.Acquired
	err := q.hc.Do(history.QAcquire{Name: name, Owner: q.owner, Level: level, Wait: wait}, func() (any, error) {
		var err error
		a, err = scripts.Acquire(context.Background(), q.rdb, scripts.KeysFor("jepsen-q", name), &scripts.Request{Owner: q.owner, TTL: linTTL, Level: level, Waiter: w})
		return history.AcquireResult{Acquired: a.OK, Token: a.Token, Depth: a.Depth}, err
	})
	if err != nil {
		t.Errorf("acquire: %v", err)
		return false
	}
	if a.OK && !containsLevel(q.held[name], level) {
		q.held[name] = append(q.held[name], linLevel{level, a.Token})
	}
	return a.OK
}

// release releases a random level this owner holds on name.
func (q *linQueueWorker) release(t *testing.T, name string) {
	ls := q.held[name]
	i := q.rng.IntN(len(ls))
	l := ls[i]
	q.held[name] = append(ls[:i:i], ls[i+1:]...)
	err := q.hc.Do(history.QRelease{Name: name, Owner: q.owner, Level: l.id, Token: l.token}, func() (any, error) {
		n, err := scripts.Release(context.Background(), q.rdb, scripts.KeysFor("jepsen-q", name), q.owner, l.token, l.id, scripts.Tokens{})
		return history.ReleaseResult{Released: n.Depth >= 0, Depth: n.Depth}, err
	})
	if err != nil {
		t.Errorf("release: %v", err)
	}
}

func containsLevel(ls []linLevel, id string) bool {
	for _, l := range ls {
		if l.id == id {
			return true
		}
	}
	return false
}

// linHandoffs counts the acquisitions of a history that came from a queue:
// a Lock's poll that found the lock handed to it.
func linHandoffs(ops []porcupine.Operation) (handed, queued int) {
	waiting := map[string]bool{}
	for _, op := range ops {
		in, ok := op.Input.(history.QAcquire)
		if !ok || !in.Wait {
			continue
		}
		if op.Output.(history.AcquireResult).Acquired {
			if waiting[in.Level] {
				handed++
			}
			continue
		}
		if !waiting[in.Level] {
			waiting[in.Level] = true
			queued++
		}
	}
	return handed, queued
}

// TestLinearizableQueue: the queue workload, on miniredis and a real Redis,
// is linearizable against the queue model, and waiters were queued and
// handed the lock (the check would mean little otherwise).
func TestLinearizableQueue(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		workers, ops := linScale()
		rec := linQueueRun(t, b.Client, workers, ops)
		n := linCheck(t, "queue", rec, history.QueueLockModel())
		handed, queued := linHandoffs(rec.Operations())
		t.Logf("%d Lock calls queued, %d handed the lock by a release", queued, handed)
		if n.OK == 0 || handed == 0 {
			t.Errorf("%v, %d handoffs: the run must queue waiters and hand them the lock", n, handed)
		}
	})
}

// TestLinearizableQueueCatchesUnfairHandoff plants a handoff to the newest
// waiter instead of the oldest; the queue model must call the history
// illegal.
func TestLinearizableQueueCatchesUnfairHandoff(t *testing.T) {
	mutant.HandoffToNewestWaiter(t)
	_, c := testenv.Mini(t)
	workers, ops := linScale()
	rec := linQueueRun(t, c, workers, ops)
	r := history.NotLinearizable(t, history.QueueLockModel(), rec.Operations(), linCheckTimeout)
	t.Logf("%v; check %v", rec.Counts(), r)
	if r.Verdict != porcupine.Illegal {
		t.Fatal("unreachable: NotLinearizable fails the test otherwise")
	}
}
