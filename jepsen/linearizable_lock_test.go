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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/history"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
)

// linLockWorld is what a lock run works on.
type linLockWorld struct {
	rdb       redis.UniversalClient // the lock's Redis, also for raw scripts
	store     storage.Store         // holders write their token here
	names     []string
	opTimeout time.Duration
	// release, when set, replaces the real release script for raw
	// releases: the hook for a deliberately broken lock.
	release func(ctx context.Context, k lua.Keys, owner string, t fence.Token) (int64, error)
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
		lc, err := reentrant.New(w.rdb, reentrant.WithTTL(linTTL), reentrant.WithMaxRetryDelay(200*time.Millisecond))
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
// records it with the depth the script reports.
func (k *linWorker) rawRelease(ctx context.Context, name string, t fence.Token) (int64, error) {
	var n int64
	err := k.hl.Do(history.Release{Name: name, Owner: string(k.owner), Token: t}, func() (any, error) {
		var err error
		keys := lua.KeysFor(reentrant.DefaultPrefix, name)
		if k.w.release != nil {
			n, err = k.w.release(ctx, keys, string(k.owner), t)
		} else {
			// A level ID nobody took: a release with the wrong token is
			// refused before the level is looked at.
			n, err = lua.Release(ctx, k.w.rdb, keys, string(k.owner), t, linReqID(), lua.Tokens{})
		}
		switch {
		case err != nil:
			return nil, err
		case n < 0:
			return history.ReleaseResult{}, nil
		}
		return history.ReleaseResult{Released: true, Depth: n}, nil
	})
	return n, err
}

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
