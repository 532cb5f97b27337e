// Linearizability: this file records concurrent histories of the lock and the
// fenced stores, on miniredis, a real Redis, PostgreSQL and SQLite, with and
// without network faults, and checks them for linearizability with
// porcupine (see internal/history). Each checker is also run on a
// deliberately broken variant, to show it can fail.
//
// REDFENCE_LONG=1 runs more clients and operations.

package jepsen_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/history"
	"github.com/redfence/redfence/internal/netfault"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
	"github.com/redfence/redfence/storage/redisstore"
	"github.com/redfence/redfence/storage/sqlstore"
)

// linCheckTimeout bounds each porcupine run. Histories here check in
// milliseconds; a timeout means the workload grew too concurrent.
const linCheckTimeout = 30 * time.Second

// linScale returns the number of concurrent workers and the total operation
// budget of one run: small by default, larger with REDFENCE_LONG=1. An
// environment variable rather than a flag, because a custom flag breaks
// `go test ./...` for every package that does not define it.
func linScale() (workers, ops int) {
	if os.Getenv("REDFENCE_LONG") == "1" {
		return 10, 3000
	}
	return 6, 300
}

// linTTL outlives every run, so no lease expires and the lock model,
// which knows nothing of expiry, applies.
const linTTL = time.Minute

func linReqID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "jepsen:" + hex.EncodeToString(b[:])
}

// linCheck checks one recorded history and logs its figures.
func linCheck(t *testing.T, what string, rec *history.Recorder, m porcupine.Model) history.Counts {
	t.Helper()
	r := history.Linearizable(t, m, rec.Operations(), linCheckTimeout)
	n := rec.Counts()
	t.Logf("%s: %v; check %v", what, n, r)
	return n
}

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

// linRunStore runs workers concurrent clients against s for ops operations in
// all, on two keys: Puts and Deletes with fresh, current and stale tokens,
// Gets and Highests. Tokens are drawn from a per-key counter, so fresh
// writers race and some of them lose.
func linRunStore(t *testing.T, s storage.Store, workers, ops int, opTimeout time.Duration) *history.Recorder {
	t.Helper()
	base := testenv.Unique(t)
	keys := []string{base + "-x", base + "-y"}
	var issued [2]atomic.Uint64
	rec := history.NewRecorder()
	var budget atomic.Int64
	budget.Store(int64(ops))
	var wg sync.WaitGroup
	for i := range workers {
		rng := mrand.New(mrand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
		wg.Go(func() {
			c := rec.Client()
			for seq := 0; budget.Add(-1) >= 0; seq++ {
				if c.Crashed() {
					c = rec.Client()
				}
				ki := rng.IntN(len(keys))
				key := keys[ki]
				ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
				switch r := rng.IntN(100); {
				case r < 45:
					tok := linToken(rng, &issued[ki])
					_ = c.Put(ctx, s, key, fmt.Sprintf("c%d.%d@%d", i, seq, tok), tok)
				case r < 50:
					_ = c.Delete(ctx, s, key, linToken(rng, &issued[ki]))
				case r < 85:
					_, _ = c.Get(ctx, s, key)
				default:
					_, _ = c.HighestToken(ctx, s, key)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	return rec
}

// linToken returns a fresh token half the time, the latest one issued (which
// may or may not have been written yet) a third of the time, and otherwise
// a stale one.
func linToken(rng *mrand.Rand, issued *atomic.Uint64) fence.Token {
	switch r := rng.IntN(10); {
	case r < 5:
		return fence.Token(issued.Add(1))
	case r < 8:
		return fence.Token(max(issued.Load(), 1))
	}
	return fence.Token(max(int64(issued.Load())-1-int64(rng.IntN(3)), 1))
}

// linStoreCase is one adapter under test, built for a test.
type linStoreCase struct {
	name string
	open func(t *testing.T) storage.Store
}

// linStores lists every adapter: the memory reference, redisstore on
// miniredis and on a real Redis, sqlstore on PostgreSQL and SQLite.
// Adapters whose server is not configured skip.
func linStores() []linStoreCase {
	return []linStoreCase{
		{"memory", func(*testing.T) storage.Store { return memory.New() }},
		{"redisstore/miniredis", func(t *testing.T) storage.Store {
			_, c := testenv.Mini(t)
			return linRedisStore(t, c)
		}},
		{"redisstore/redis", func(t *testing.T) storage.Store { return linRedisStore(t, testenv.Redis(t)) }},
		{"sqlstore/postgres", func(t *testing.T) storage.Store {
			return linSQLStore(t, "pgx", testenv.PostgresURL(t), sqlstore.Postgres)
		}},
		{"sqlstore/sqlite", func(t *testing.T) storage.Store {
			dsn := sqlstore.SQLiteDSN(filepath.Join(t.TempDir(), "store.db"))
			return linSQLStore(t, "sqlite", dsn, sqlstore.SQLite)
		}},
	}
}

func linRedisStore(t *testing.T, c redis.Scripter) storage.Store {
	t.Helper()
	s, err := redisstore.New(c, redisstore.WithPrefix("jepsen:"+testenv.Unique(t)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// linSQLStore opens a store on a fresh table, dropped when the test ends.
func linSQLStore(t *testing.T, driver, dsn string, d sqlstore.Dialect) storage.Store {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	table := "rf_jepsen_" + hex.EncodeToString(b[:])
	s, err := sqlstore.New(db, d, sqlstore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("%s: %v", driver, err)
	}
	t.Cleanup(func() {
		// t.Context() is already cancelled when cleanups run.
		if _, err := db.ExecContext(context.Background(), "DROP TABLE "+s.Table()); err != nil {
			t.Errorf("drop %s: %v", s.Table(), err)
		}
	})
	return s
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

// TestLinearizableStore: concurrent writers with fresh, current
// and stale tokens, and readers, against every adapter, are linearizable
// against the fenced register: a write with an older token is never
// visible and never raises the highest token.
func TestLinearizableStore(t *testing.T) {
	workers, ops := linScale()
	for _, sc := range linStores() {
		t.Run(sc.name, func(t *testing.T) {
			rec := linRunStore(t, sc.open(t), workers, ops, 5*time.Second)
			n := linCheck(t, sc.name, rec, history.RegisterModel())
			if n.Unknown != 0 || n.Failed == 0 {
				t.Errorf("%v: want no unknown outcome without faults, and some stale writes refused", n)
			}
		})
	}
}

// TestLinearizableUnderNetworkFaults runs the lock and store workloads through
// a proxy that adds latency, delays replies past the client's timeout and
// resets every connection now and then. Some operations end with unknown
// outcomes; the histories must still be linearizable. The TTL is long, so
// no lease expires and the lock model still applies.
func TestLinearizableUnderNetworkFaults(t *testing.T) {
	workers, ops := linScale()
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		p, err := netfault.New(b.Client.Options().Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		// The lock's client retries, as go-redis does by default: the
		// scripts must answer a retried call as they answered the first.
		c := linFaultyClient(t, p, 1)
		// The stores' client does not: redisstore answers ErrStale to the
		// retry of a write its first attempt applied once a higher token
		// has been accepted in between (its package doc says so), and the
		// register model takes ErrStale at its word.
		sc := linFaultyClient(t, p, -1)

		stop := linChaos(p)
		w := linLockWorld{rdb: c, store: linRedisStore(t, sc), names: linLockNames(t), opTimeout: 300 * time.Millisecond}
		run := linRunLocks(t, w, workers, ops)
		store := linRunStore(t, linRedisStore(t, sc), workers, ops, 300*time.Millisecond)
		faults := stop()
		t.Logf("faults: %s; proxy %+v", faults, p.Stats())

		var unknown int
		unknown += linCheck(t, "lock", run.locks, history.LockModel()).Unknown
		unknown += linCheck(t, "fenced writes", run.writes, history.RegisterModel()).Unknown
		unknown += linCheck(t, "store", store, history.RegisterModel()).Unknown
		if unknown == 0 {
			t.Errorf("no operation ended with an unknown outcome: the faults did not bite")
		}
	})
}

// TestLinearizableRetriedFullRelease pins down the race the fault run can
// hit: owner A's full release runs, its reply comes after go-redis's read
// timeout, and before go-redis's retry arrives owner B takes and fully
// releases the lock. The retry must still be answered "released", as the
// release script promises for a repeated call; an ErrNotHeld here is a
// release that happened reported as one that did not.
func TestLinearizableRetriedFullRelease(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		p, err := netfault.New(b.Client.Options().Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		la, err := reentrant.New(linFaultyClient(t, p, 2), reentrant.WithTTL(linTTL))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = la.Close() })
		lb, err := reentrant.New(b.Client, reentrant.WithTTL(linTTL))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lb.Close() })

		rec := history.NewRecorder()
		ca, cb := rec.Client(), rec.Client()
		ctxA := reentrant.WithOwner(t.Context(), reentrant.NewOwner())
		ctxB := reentrant.WithOwner(t.Context(), reentrant.NewOwner())
		name := testenv.Unique(t)
		lease, err := ca.TryLock(ctxA, la, name)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			// B gets the lock the moment A's release has run.
			for range 1000 {
				if l, err := cb.TryLock(ctxB, lb, name); err == nil {
					_ = cb.Unlock(ctxB, l)
					return
				}
				if cb.Crashed() {
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
		p.DelayNext(netfault.Downstream, 300*time.Millisecond)
		uctx, cancel := context.WithTimeout(ctxA, 5*time.Second)
		defer cancel()
		err = ca.Unlock(uctx, lease)
		wg.Wait()
		t.Logf("A's Unlock with a late reply: %v", err)
		linCheck(t, "retried release", rec, history.LockModel())
	})
}

// linFaultyClient returns a client of the Redis behind p, with timeouts
// short enough for the proxy's delays to exceed them, and retries as given
// (-1: none).
func linFaultyClient(t *testing.T, p *netfault.Proxy, retries int) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:                  p.Addr(),
		DialTimeout:           200 * time.Millisecond,
		ReadTimeout:           100 * time.Millisecond,
		WriteTimeout:          100 * time.Millisecond,
		MaxRetries:            retries,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// linChaos injects faults into p until the returned function is called, which
// returns what was injected.
func linChaos(p *netfault.Proxy) func() string {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var resets, delays int
	wg.Go(func() {
		rng := mrand.New(mrand.NewPCG(1, uint64(time.Now().UnixNano())))
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			p.SetLatency(netfault.Upstream, time.Duration(rng.IntN(10))*time.Millisecond)
			p.SetLatency(netfault.Downstream, time.Duration(rng.IntN(10))*time.Millisecond)
			switch rng.IntN(20) {
			case 0:
				p.ResetAll()
				resets++
			case 1, 2:
				// Past the read timeout: the server has run the command,
				// the client gives up on it or retries it.
				p.DelayNext(netfault.Downstream, 150*time.Millisecond)
				delays++
			}
		}
	})
	return func() string {
		close(done)
		wg.Wait()
		p.SetLatency(netfault.Upstream, 0)
		p.SetLatency(netfault.Downstream, 0)
		p.DelayNext(netfault.Downstream, 0)
		return fmt.Sprintf("%d resets, %d delayed replies, latency 0-10ms each way", resets, delays)
	}
}

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
// the token but not the owner. Tokens are small sequential integers anyone
// can read, so it lets any client release anyone's lock.
var linOwnerBlindRelease = redis.NewScript(`
local h = redis.call('HMGET', KEYS[1], 'count', 'token')
if h[2] ~= ARGV[1] then return -1 end
local n = tonumber(h[1])
if n > 1 then
  redis.call('HSET', KEYS[1], 'count', string.format('%d', n - 1))
  return n - 1
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[1])
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
		_, c := testenv.Mini(t)
		w := linLockWorld{rdb: c, store: memory.New(), names: linLockNames(t), opTimeout: 5 * time.Second,
			release: func(ctx context.Context, k lua.Keys, _ string, tok fence.Token) (int64, error) {
				return linOwnerBlindRelease.Run(ctx, c, []string{k.Lock}, tok.String(), k.Channel).Int64()
			}}
		run := linRunLocks(t, w, workers, ops)
		r := history.NotLinearizable(t, history.LockModel(), run.locks.Operations(), linCheckTimeout)
		t.Logf("%v; check %v", run.locks.Counts(), r)
	})
	t.Run("fencing counter reset", func(t *testing.T) {
		// As when maxmemory-policy allkeys-lru evicts the counter: the
		// next fresh acquisition starts again at token 1.
		_, c := testenv.Mini(t)
		w := linLockWorld{rdb: c, store: memory.New(), names: linLockNames(t), opTimeout: 5 * time.Second}
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
					f := lua.KeysFor(reentrant.DefaultPrefix, name).Fence
					if n, _ := c.Get(context.Background(), f).Int(); n >= 2 {
						c.Del(context.Background(), f)
						resets.Add(1)
					}
				}
			}
		})
		run := linRunLocks(t, w, workers, ops)
		close(done)
		wg.Wait()
		r := history.NotLinearizable(t, history.LockModel(), run.locks.Operations(), linCheckTimeout)
		t.Logf("%v, %d counter resets; check %v", run.locks.Counts(), resets.Load(), r)
	})
}
