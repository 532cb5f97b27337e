package redfence_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/mutant"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

const propPrefix = "rfprop"

// lockModel is what the lock should look like: who holds it, how deep, with
// which token, and the last token ever issued.
type lockModel struct {
	owner int // -1: free
	depth int
	token fence.Token
	last  fence.Token
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
// try-lock / extend / expire against one lock name and compares every
// answer with lockModel.
type lockMachine struct {
	b      testenv.Backend
	c      *reentrant.Client
	name   string
	owners []context.Context
	leases []*leaseRec
	queue  []*waiterRec // the model's queue, oldest first
	m      lockModel
	hist   []string // what the case did, for a failure's message
}

func newLockMachine(t *rapid.T, b testenv.Backend, c *reentrant.Client, owners int) *lockMachine {
	lm := &lockMachine{b: b, c: c, name: fmt.Sprintf("prop-%d", time.Now().UnixNano()), m: lockModel{owner: -1}}
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
		lm.m = lockModel{owner: o, depth: 1, token: l.Token(), last: l.Token()}
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
		lm.m.owner, lm.m.token = -1, fence.None
		lm.handOff(t)
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
	n, err := lua.Release(context.Background(), lm.b.Client, lua.KeysFor(propPrefix, lm.name),
		string(l.Owner()), l.Token(), l.ID(), lua.Tokens{})
	if err != nil {
		t.Fatalf("replayed release: %v", err)
	}
	if n < -1 {
		t.Fatalf("replayed release answered %d", n)
	}
}

// expire makes the lease run out: miniredis's clock jumps past the TTL; on
// a real Redis the lease's end is moved to the past, as if it had run out.
func (lm *lockMachine) expire(t *rapid.T) {
	if lm.b.Mini != nil {
		// Past the lease, and short of the queue's own expiry.
		testenv.Advance(lm.b.Mini, time.Minute+time.Second)
	} else if err := lm.b.Client.Eval(context.Background(),
		`if redis.call('HEXISTS', KEYS[1], 'x') == 1 then redis.call('HSET', KEYS[1], 'x', '1') end`,
		[]string{lua.KeysFor(propPrefix, lm.name).Lock}).Err(); err != nil && err.Error() != "redis: nil" {
		t.Fatalf("expire: %v", err)
	}
	for _, r := range lm.leases {
		r.live = false
	}
	lm.m.owner, lm.m.depth, lm.m.token = -1, 0, fence.None
	lm.handOff(t)
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
	r := lm.result(t, w)
	if r.err != nil {
		t.Fatalf("the oldest waiter (owner %d) got %v, want the lock", w.owner, r.err)
	}
	if r.lease.Token() != lm.m.last+1 || r.lease.Depth() != 1 || r.lease.Owner() != mustOwner(lm.owners[w.owner]) {
		t.Fatalf("handoff gave owner %s token %d depth %d; want owner %d token %d depth 1",
			r.lease.Owner(), r.lease.Token(), r.lease.Depth(), w.owner, lm.m.last+1)
	}
	lm.m = lockModel{owner: w.owner, depth: 1, token: r.lease.Token(), last: r.lease.Token()}
	lm.hist = append(lm.hist, fmt.Sprintf("  handoff owner %d token %d level %s", w.owner, r.lease.Token(), r.lease.ID()))
	lm.leases = append(lm.leases, &leaseRec{owner: w.owner, lease: r.lease, live: true})
	lm.awaitWaiters(t)
}

// result waits for a waiter's outcome: it comes within a few polls (10 ms
// each), so 3 s means it never will.
func (lm *lockMachine) result(t *rapid.T, w *waiterRec) waitResult {
	select {
	case r := <-w.res:
		return r
	case <-time.After(3 * time.Second):
		st, err := lm.c.Inspect(context.Background(), lm.name)
		q := lm.b.Client.ZRange(context.Background(), lua.KeysFor(propPrefix, lm.name).Queue, 0, -1).Val()
		t.Fatalf("owner %d's Lock did not return; state %+v (%v), queue %q", w.owner, st, err, q)
		return waitResult{}
	}
}

// awaitWaiters waits until Redis's queue has the model's length: a Lock
// call queues, and a leaving one dequeues, a little after it starts or
// ends.
func (lm *lockMachine) awaitWaiters(t *rapid.T) {
	var st reentrant.State
	for range 1000 {
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

// stop ends every waiter still queued when a case ends.
func (lm *lockMachine) stop() {
	for _, w := range lm.queue {
		w.cancel()
		<-w.res
	}
	lm.queue = nil
}

func (lm *lockMachine) check(t *rapid.T) {
	st, err := lm.c.Inspect(context.Background(), lm.name)
	if err != nil {
		t.Fatal(err)
	}
	held := lm.m.owner != -1
	if st.Held != held || st.Depth != int64(lm.m.depth) || st.Token != lm.m.token || st.LastToken != lm.m.last {
		q := lm.b.Client.ZRange(context.Background(), lua.KeysFor(propPrefix, lm.name).Queue, 0, -1).Val()
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

func lockMachineBody(b testenv.Backend, c *reentrant.Client) func(*rapid.T) {
	return func(t *rapid.T) {
		lm := newLockMachine(t, b, c, rapid.IntRange(1, 4).Draw(t, "owners"))
		defer lm.stop()
		w := func(n string, f func(*rapid.T)) func(*rapid.T) {
			return func(t *rapid.T) {
				lm.hist = append(lm.hist, fmt.Sprintf("%s model-before %+v q%d", n, lm.m, len(lm.queue)))
				f(t)
			}
		}
		t.Repeat(map[string]func(*rapid.T){
			"wait":    w("wait", lm.wait),
			"leave":   w("leave", lm.leave),
			"lock":    w("lock", func(t *rapid.T) { lm.acquire(t, false) }),
			"trylock": w("trylock", func(t *rapid.T) { lm.acquire(t, true) }),
			"unlock":  w("unlock", lm.unlock),
			"extend":  w("extend", lm.extend),
			"replay":  w("replay", lm.replay),
			"expire":  w("expire", lm.expire),
			"":        lm.check,
		})
	}
}

func propClient(t *testing.T, b testenv.Backend) *reentrant.Client {
	// Waiters poll every 10 ms, which is how they find a lock that expired;
	// a handed lock waits for its claim as long as the case may need.
	c, err := reentrant.New(b.Client, reentrant.WithPrefix(propPrefix),
		reentrant.WithTTL(time.Minute), reentrant.WithoutRenewal(),
		reentrant.WithHandoffTimeout(40*time.Second), reentrant.WithMaxRetryDelay(10*time.Millisecond),
		reentrant.WithRetryJitter(2*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestLockProperties(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		factor := 8 // miniredis: fast, many cases
		if b.Mini == nil {
			factor = 2
		}
		withChecks(t, factor, func() { rapid.Check(t, lockMachineBody(b, propClient(t, b))) })
	})
}

// TestLockPropertiesCatchBrokenRelease swaps in a release script that skips
// the owner and token check and asserts the state machine notices: the
// property test is able to fail.
func TestLockPropertiesCatchBrokenRelease(t *testing.T) {
	catchesMutant(t, "MutantReleaseWithoutOwnerCheck", mutant.ReleaseWithoutOwnerCheck,
		"the state machine accepted a release that skips the owner check")
}

// TestLockPropertiesCatchUnfairHandoff plants a release that hands the lock
// to the newest waiter instead of the oldest: the machine must notice.
func TestLockPropertiesCatchUnfairHandoff(t *testing.T) {
	catchesMutant(t, "MutantHandoffToNewestWaiter", mutant.HandoffToNewestWaiter,
		"the state machine accepted a handoff to the newest waiter")
}

// TestLockPropertiesCatchReplayedRelease reintroduces the bug the level
// layout fixed: a release whose level is already gone (a retry) takes
// another level instead, as the count-based script did when the owner had
// reentered between the two attempts. The replay action must notice.
func TestLockPropertiesCatchReplayedRelease(t *testing.T) {
	catchesMutant(t, "MutantReplayedReleaseTakesALevel", mutant.ReplayedReleaseTakesALevel,
		"the state machine accepted a replayed release that took another level")
}

// catchesMutant plants a broken script on miniredis and fails t unless the
// lock machine reports a failure.
func catchesMutant(t *testing.T, name string, plant func(testing.TB), msg string) {
	m, rdb := testenv.Mini(t)
	b := testenv.Backend{Name: "miniredis", Client: rdb, Mini: m}
	plant(t)
	rec := mustFail(t, name)
	rapid.Check(rec, lockMachineBody(b, propClient(t, b)))
	require.True(t, rec.failed, msg)
}

// failRecorder stands in for *testing.T where a check is expected to fail:
// it records the failure instead of failing the test.
type failRecorder struct {
	testing.TB
	name   string
	failed bool
}

func mustFail(t *testing.T, name string) *failRecorder {
	// rapid saves a failing case under testdata/rapid/NAME; a mutant's case
	// is not one to keep.
	t.Cleanup(func() {
		_ = os.RemoveAll(filepath.Join("testdata", "rapid", name))
		_ = os.Remove(filepath.Join("testdata", "rapid")) // only if empty
		_ = os.Remove("testdata")
	})
	// Shrinking a mutant's failure to a minimal case is not the point here;
	// the failure itself is.
	old := flag.Lookup("rapid.shrinktime").Value.String()
	require.NoError(t, flag.Set("rapid.shrinktime", "1s"))
	t.Cleanup(func() { _ = flag.Set("rapid.shrinktime", old) })
	return &failRecorder{TB: t, name: name}
}

func (r *failRecorder) Name() string          { return r.name }
func (r *failRecorder) Logf(string, ...any)   {}
func (r *failRecorder) Log(...any)            {}
func (r *failRecorder) Errorf(string, ...any) { r.failed = true }
func (r *failRecorder) Error(...any)          { r.failed = true }
func (r *failRecorder) Fatalf(string, ...any) { r.failed = true }
func (r *failRecorder) Fatal(...any)          { r.failed = true }
func (r *failRecorder) Fail()                 { r.failed = true }
func (r *failRecorder) FailNow()              { r.failed = true }
func (r *failRecorder) Failed() bool          { return r.failed }
