// The queue workload: owners lock (waiting in the queue, polling), try-lock,
// reenter, release and give up waiting, each step one run of a lock script,
// and the history is checked against the lock model with its wait queue and
// direct handoff (history.QueueLockModel): waiters are served first come,
// first served, a release hands the lock to the oldest waiter, a TryLock
// never jumps the queue, and reentry never queues.

package jepsen_test

import (
	"context"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/history"
	"github.com/redfence/redfence/internal/mutant"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
)

// linQueueWaiter is every waiter's queue entry: nobody listens on its
// channel (waiters poll), and a handed lock waits for its claim longer than
// any run, so that nothing expires and the model applies.
var linQueueWaiter = lua.Waiter{Channel: "jepsen:nobody", Claim: linTTL, Queue: 2 * linTTL}

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
		removed, err := lua.Abandon(context.Background(), q.rdb, lua.KeysFor("jepsen-q", name), &lua.Request{Owner: q.owner, Level: level, Waiter: &linQueueWaiter})
		return history.LeaveResult{Removed: removed}, err
	})
	if err != nil {
		t.Errorf("leave: %v", err)
	}
}

// acquire runs the acquire script once for level and reports whether this
// owner holds it afterwards.
func (q *linQueueWorker) acquire(t *testing.T, name, level string, wait bool) bool {
	var w *lua.Waiter
	if wait {
		w = &linQueueWaiter
	}
	var a lua.Acquired
	err := q.hc.Do(history.QAcquire{Name: name, Owner: q.owner, Level: level, Wait: wait}, func() (any, error) {
		var err error
		a, err = lua.Acquire(context.Background(), q.rdb, lua.KeysFor("jepsen-q", name), &lua.Request{Owner: q.owner, TTL: linTTL, Level: level, Waiter: w})
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
		n, err := lua.Release(context.Background(), q.rdb, lua.KeysFor("jepsen-q", name), q.owner, l.token, l.id, lua.Tokens{})
		return history.ReleaseResult{Released: n >= 0, Depth: n}, err
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
