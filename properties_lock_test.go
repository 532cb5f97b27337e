package redfence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage/memory"
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
// gone, and the counter is not: the next ownership gets a higher token.
// With waiters queued, their places would go too and their order with
// them; the model's queue cannot say what follows, so it is not done then.
func (lm *lockMachine) delete(t *rapid.T) {
	if len(lm.queue) > 0 {
		t.Skip("waiters queued")
	}
	k := lua.KeysFor(propPrefix, lm.name)
	if err := lm.b.Client.Del(context.Background(), k.Lock, k.Queue).Err(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	for _, r := range lm.leases {
		r.live = false
	}
	lm.m.owner, lm.m.depth, lm.m.token = -1, 0, fence.None
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
