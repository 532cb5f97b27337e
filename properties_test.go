package redfence_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
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
	m      lockModel
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
		string(l.Owner()), l.Token(), l.ID(), time.Minute)
	if err != nil {
		t.Fatalf("replayed release: %v", err)
	}
	if n < -1 {
		t.Fatalf("replayed release answered %d", n)
	}
}

// expire makes the lease run out: miniredis's clock jumps past the TTL; a
// real Redis is told to expire the key in 1 ms, and does so by itself.
func (lm *lockMachine) expire(t *rapid.T) {
	if lm.b.Mini != nil {
		lm.b.Mini.FastForward(2 * time.Minute)
	} else {
		k := lua.KeysFor(propPrefix, lm.name).Lock
		lm.b.Client.PExpire(context.Background(), k, time.Millisecond)
		for lm.b.Client.Exists(context.Background(), k).Val() == 1 {
			time.Sleep(time.Millisecond)
		}
	}
	for _, r := range lm.leases {
		r.live = false
	}
	lm.m.owner, lm.m.depth, lm.m.token = -1, 0, fence.None
}

func (lm *lockMachine) check(t *rapid.T) {
	st, err := lm.c.Inspect(context.Background(), lm.name)
	if err != nil {
		t.Fatal(err)
	}
	held := lm.m.owner != -1
	if st.Held != held || st.Depth != int64(lm.m.depth) || st.Token != lm.m.token || st.LastToken != lm.m.last {
		t.Fatalf("state %+v, model %+v", st, lm.m)
	}
	if held && st.Owner != mustOwner(lm.owners[lm.m.owner]) {
		t.Fatalf("owner %s, model owner %d", st.Owner, lm.m.owner)
	}
	if held && st.TTL <= 0 {
		t.Fatalf("a held lock must carry a TTL, has %v", st.TTL)
	}
}

func mustOwner(ctx context.Context) reentrant.Owner {
	o, _ := reentrant.OwnerFrom(ctx)
	return o
}

func lockMachineBody(b testenv.Backend, c *reentrant.Client) func(*rapid.T) {
	return func(t *rapid.T) {
		lm := newLockMachine(t, b, c, rapid.IntRange(1, 4).Draw(t, "owners"))
		t.Repeat(map[string]func(*rapid.T){
			"lock":    func(t *rapid.T) { lm.acquire(t, false) },
			"trylock": func(t *rapid.T) { lm.acquire(t, true) },
			"unlock":  lm.unlock,
			"extend":  lm.extend,
			"replay":  lm.replay,
			"expire":  lm.expire,
			"":        lm.check,
		})
	}
}

func propClient(t *testing.T, b testenv.Backend) *reentrant.Client {
	c, err := reentrant.New(b.Client, reentrant.WithPrefix(propPrefix),
		reentrant.WithTTL(time.Minute), reentrant.WithoutRenewal())
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
	m, rdb := testenv.Mini(t)
	b := testenv.Backend{Name: "miniredis", Client: rdb, Mini: m}
	mutant.ReleaseWithoutOwnerCheck(t)

	rec := mustFail(t, "MutantReleaseWithoutOwnerCheck")
	rapid.Check(rec, lockMachineBody(b, propClient(t, b)))
	require.True(t, rec.failed, "the state machine accepted a release that skips the owner check")
}

// TestLockPropertiesCatchReplayedRelease reintroduces the bug the level
// layout fixed: a release whose level is already gone (a retry) takes
// another level instead, as the count-based script did when the owner had
// reentered between the two attempts. The replay action must notice.
func TestLockPropertiesCatchReplayedRelease(t *testing.T) {
	m, rdb := testenv.Mini(t)
	b := testenv.Backend{Name: "miniredis", Client: rdb, Mini: m}
	mutant.ReplayedReleaseTakesALevel(t)

	rec := mustFail(t, "MutantReplayedReleaseTakesALevel")
	rapid.Check(rec, lockMachineBody(b, propClient(t, b)))
	require.True(t, rec.failed, "the state machine accepted a replayed release that took another level")
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
