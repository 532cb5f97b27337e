// The lock workload: concurrent owners lock, reenter, unlock and release
// with wrong tokens, and write to a fenced store while they hold a name and
// after they gave it up. The network-fault and broken-variant tests reuse it.

package jepsen_test

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
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
	for i := range workers {
		lc, err := reentrant.New(w.rdb, reentrant.WithTTL(linTTL), reentrant.WithMaxRetryDelay(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lc.Close() })
		k := &linWorker{w: &w, run: run, lc: lc, owner: reentrant.NewOwner(), id: i,
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

// linHolding is what a worker knows of its hold on one name: the token, the
// depth the server last reported, and the leases it has. A worker whose
// client crashed forgets its leases; the depth they held shows up as the
// difference on its next reentry, and is released with the raw script.
type linHolding struct {
	token  fence.Token
	depth  int64
	leases []*reentrant.Lease
}

// linWorker is one owner of a lock run; its process (history client)
// changes when an operation's outcome is unknown, its owner never does.
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
		// A new process, the same owner: what the crashed one held, it
		// still holds, and finds out by reentering.
		k.hl, k.held = k.run.locks.Client(), map[string]*linHolding{}
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

// windDown releases every hold of the owner, those its crashed processes
// left included, so no other worker waits for an owner that has stopped.
func (k *linWorker) windDown() {
	for _, name := range k.w.names {
		for range 3 {
			if k.hl == nil || k.hl.Crashed() {
				k.hl, k.held = k.run.locks.Client(), map[string]*linHolding{}
			}
			if k.held[name] == nil {
				// Reentering reveals a hold a crashed process left.
				k.acquire(name)
			}
			for h := k.held[name]; h != nil && !k.hl.Crashed(); h = k.held[name] {
				k.release(name, h)
			}
			if !k.hl.Crashed() {
				break
			}
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
	if h == nil {
		h = &linHolding{}
		k.held[name] = h
	}
	h.token, h.depth = lease.Token(), lease.Depth()
	h.leases = append(h.leases, lease)
	k.last[name] = h.token
}

// release undoes one acquisition: a hold with no lease left (its process
// crashed) through the raw script, which reports the depth left, otherwise
// by unlocking a random lease.
func (k *linWorker) release(name string, h *linHolding) {
	ctx, cancel := context.WithTimeout(k.ctx, k.w.opTimeout)
	defer cancel()
	if int64(len(h.leases)) < h.depth {
		n, err := k.rawRelease(ctx, name, h.token)
		switch {
		case err != nil:
		case n < 0:
			delete(k.held, name)
		default:
			h.depth = n
		}
		if h.depth == 0 {
			delete(k.held, name)
		}
		return
	}
	i := k.rng.IntN(len(h.leases))
	lease := h.leases[i]
	h.leases = append(h.leases[:i], h.leases[i+1:]...)
	switch err := k.hl.Unlock(ctx, lease); {
	case err == nil:
		h.depth--
	case errors.Is(err, reentrant.ErrNotHeld):
		h.depth = 0
	}
	if h.depth == 0 {
		delete(k.held, name)
	}
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
		t = max(st.Token, st.LastToken, 1)
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
			n, err = lua.Release(ctx, k.w.rdb, keys, string(k.owner), t, linReqID(), time.Minute)
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
