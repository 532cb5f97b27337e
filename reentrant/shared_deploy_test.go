//go:build unix

package reentrant_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/hashslot"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// Read-write locks and semaphores on real multi-process deployments: a
// Redis Cluster of three primaries (names on each, a slot move under
// concurrent calls) and Sentinel (a forced failover). The holders check
// exclusion themselves, with atomic counters, and every grant's token is
// logged in the order the holders entered, so the order of the log is the
// order of the grants wherever the lock excludes.

// sharedCeiling bounds each deployment test's calls: a call still
// waiting when it ends was stuck (a lost handoff, a lock never released).
// Far above what a loaded machine needs, far below a minute-polling
// waiter's next poll.
const sharedCeiling = 40 * time.Second

// sharedPermits is the count of the tests' semaphores.
const sharedPermits = 2

// rwCheck watches one read-write lock from its holders' side.
type rwCheck struct {
	name             string
	readers, writers atomic.Int64
	mu               sync.Mutex
	log              []rwGrant // the grants, in the order their holders entered
	errs             []string
}

type rwGrant struct {
	write bool
	token fence.Token
}

func (k *rwCheck) fail(format string, args ...any) {
	k.mu.Lock()
	k.errs = append(k.errs, k.name+": "+fmt.Sprintf(format, args...))
	k.mu.Unlock()
}

func (k *rwCheck) record(g rwGrant) {
	k.mu.Lock()
	k.log = append(k.log, g)
	k.mu.Unlock()
}

// enterWrite is a writer's entry: nobody else may hold the lock.
func (k *rwCheck) enterWrite(l *reentrant.Lease) {
	if w := k.writers.Add(1); w != 1 {
		k.fail("%d writers at once", w)
	}
	if r := k.readers.Load(); r != 0 {
		k.fail("a writer (token %d) with %d readers", l.Token(), r)
	}
	k.record(rwGrant{write: true, token: l.Token()})
}

// enterRead is a reader's entry: no writer may hold the lock.
func (k *rwCheck) enterRead(l *reentrant.Lease) {
	k.readers.Add(1)
	if w := k.writers.Load(); w != 0 {
		k.fail("a reader (token %d) with %d writers", l.Token(), w)
	}
	k.record(rwGrant{token: l.Token()})
}

// verify checks the log: each write token above every token before it,
// each read token at least the last write token before it (its epoch: the
// last write lease granted, which may be one whose waiter came too late to
// claim it and so is not in the log).
func (k *rwCheck) verify(t *testing.T) (writes, reads int) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.errs {
		t.Error(e)
	}
	var top, lastWrite fence.Token
	for i, g := range k.log {
		if g.write {
			writes++
			if g.token <= top {
				t.Errorf("%s: grant %d: write token %d not above %d, the highest before it", k.name, i, g.token, top)
			}
			lastWrite = g.token
		} else {
			reads++
			if g.token < lastWrite || g.token == 0 {
				t.Errorf("%s: grant %d: read token %d below the last write token %d", k.name, i, g.token, lastWrite)
			}
		}
		top = max(top, g.token)
	}
	return writes, reads
}

// semCheck watches one semaphore from its holders' side.
type semCheck struct {
	name   string
	inUse  atomic.Int64
	slots  [sharedPermits]atomic.Bool
	mu     sync.Mutex
	bySlot map[int][]fence.Token // each slot's tokens, in the order its holders entered
	errs   []string
}

func newSemCheck(name string) *semCheck {
	return &semCheck{name: name, bySlot: map[int][]fence.Token{}}
}

func (k *semCheck) fail(format string, args ...any) {
	k.mu.Lock()
	k.errs = append(k.errs, k.name+": "+fmt.Sprintf(format, args...))
	k.mu.Unlock()
}

func (k *semCheck) enter(p *reentrant.Permit) {
	if n := k.inUse.Add(1); n > sharedPermits {
		k.fail("%d permits held at once", n)
	}
	s := p.Slot()
	if s < 0 || s >= sharedPermits {
		k.fail("slot %d out of range", s)
		return
	}
	if !k.slots[s].CompareAndSwap(false, true) {
		k.fail("slot %d held twice at once (token %d)", s, p.Token())
	}
	k.mu.Lock()
	k.bySlot[s] = append(k.bySlot[s], p.Token())
	k.mu.Unlock()
}

func (k *semCheck) leave(p *reentrant.Permit) {
	if s := p.Slot(); s >= 0 && s < sharedPermits {
		k.slots[s].Store(false)
	}
	k.inUse.Add(-1)
}

// verify checks each slot's tokens rise and no token was granted twice.
func (k *semCheck) verify(t *testing.T) (grants int) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.errs {
		t.Error(e)
	}
	seen := map[fence.Token]bool{}
	for s, toks := range k.bySlot {
		for i, tok := range toks {
			grants++
			if i > 0 && tok <= toks[i-1] {
				t.Errorf("%s: slot %d: token %d after %d", k.name, s, tok, toks[i-1])
			}
			if seen[tok] {
				t.Errorf("%s: token %d granted twice", k.name, tok)
			}
			seen[tok] = true
		}
	}
	return grants
}

// sharedLoad runs rounds on read-write locks and semaphores from several
// goroutines, each through one of the clients in turn, until each has done
// its rounds or stop is set (rounds 0: until stop).
type sharedLoad struct {
	clients []*reentrant.Client
	rw      []*rwCheck
	sem     []*semCheck
	rounds  int
	stop    atomic.Bool
	done    atomic.Int64 // rounds done, by every goroutine
	mu      sync.Mutex
	errs    []error
}

func (w *sharedLoad) err(err error) {
	w.mu.Lock()
	w.errs = append(w.errs, err)
	w.mu.Unlock()
}

// run starts, per read-write lock, two writers and three readers, and per
// semaphore four takers, and returns once all have ended.
func (w *sharedLoad) run(ctx context.Context) {
	var wg sync.WaitGroup
	n := 0
	loop := func(round func(i int) error) {
		c := n
		n++
		wg.Go(func() {
			for i := 0; (w.rounds == 0 || i < w.rounds) && !w.stop.Load(); i++ {
				if err := round(c + i); err != nil {
					w.err(err)
					if ctx.Err() != nil {
						return
					}
				}
				w.done.Add(1)
			}
		})
	}
	for _, k := range w.rw {
		for range 2 {
			loop(func(i int) error { return w.writeRound(ctx, k, w.clients[i%len(w.clients)], i) })
		}
		for range 3 {
			loop(func(i int) error { return w.readRound(ctx, k, w.clients[i%len(w.clients)], i) })
		}
	}
	for _, k := range w.sem {
		for range 4 {
			loop(func(i int) error { return w.permitRound(ctx, k, w.clients[i%len(w.clients)], i) })
		}
	}
	wg.Wait()
}

// hold is a holder's critical section: long enough for the others to
// queue behind it.
func hold() { time.Sleep(time.Millisecond) }

// writeRound takes the write lease (every fourth round with TryLock, whose
// refusal ends the round), and every third round downgrades it to a read
// lease before leaving.
func (w *sharedLoad) writeRound(ctx context.Context, k *rwCheck, c *reentrant.Client, i int) error {
	rw := c.RWMutex(k.name)
	lock := rw.Lock
	if i%4 == 3 {
		lock = rw.TryLock
	}
	l, err := lock(ctx)
	if errors.Is(err, reentrant.ErrNotAcquired) && i%4 == 3 && ctx.Err() == nil {
		return nil
	} else if err != nil {
		return fmt.Errorf("%s: write lock: %w", k.name, err)
	}
	k.enterWrite(l)
	hold()
	if i%3 != 0 {
		err = l.Err()
		k.writers.Add(-1)
		return errors.Join(err, l.Unlock(ctx))
	}
	// The downgrade: the writer's owner reads at once, at its own token.
	r, err := rw.RLock(l.Context())
	if err != nil {
		k.writers.Add(-1)
		return errors.Join(fmt.Errorf("%s: downgrade: %w", k.name, err), l.Unlock(ctx))
	}
	if r.Token() != l.Token() {
		k.fail("downgraded read token %d, not the write token %d", r.Token(), l.Token())
	}
	k.readers.Add(1)
	k.record(rwGrant{token: r.Token()})
	err = l.Err()
	k.writers.Add(-1)
	err = errors.Join(err, l.Unlock(ctx))
	hold()
	err = errors.Join(err, r.Err())
	k.readers.Add(-1)
	return errors.Join(err, r.Unlock(ctx))
}

// readRound takes a read lease (every fourth round with TryRLock), and
// every third round reenters it.
func (w *sharedLoad) readRound(ctx context.Context, k *rwCheck, c *reentrant.Client, i int) error {
	rw := c.RWMutex(k.name)
	lock := rw.RLock
	if i%4 == 3 {
		lock = rw.TryRLock
	}
	l, err := lock(ctx)
	if errors.Is(err, reentrant.ErrNotAcquired) && i%4 == 3 && ctx.Err() == nil {
		return nil
	} else if err != nil {
		return fmt.Errorf("%s: read lock: %w", k.name, err)
	}
	k.enterRead(l)
	hold()
	if i%3 == 0 {
		inner, err := rw.RLock(l.Context())
		if err == nil && (inner.Token() != l.Token() || inner.Depth() != 2) {
			err = fmt.Errorf("%s: read reentry: token %d depth %d, outer token %d", k.name, inner.Token(), inner.Depth(), l.Token())
		}
		if inner != nil {
			err = errors.Join(err, inner.Unlock(ctx))
		}
		if err != nil {
			k.readers.Add(-1)
			return errors.Join(err, l.Unlock(ctx))
		}
	}
	err = l.Err()
	k.readers.Add(-1)
	return errors.Join(err, l.Unlock(ctx))
}

// permitRound takes a permit (every fourth round with TryAcquire), and
// every third round reenters it.
func (w *sharedLoad) permitRound(ctx context.Context, k *semCheck, c *reentrant.Client, i int) error {
	sem := c.Semaphore(k.name, sharedPermits)
	acquire := sem.Acquire
	if i%4 == 3 {
		acquire = sem.TryAcquire
	}
	p, err := acquire(ctx)
	if errors.Is(err, reentrant.ErrNotAcquired) && i%4 == 3 && ctx.Err() == nil {
		return nil
	} else if err != nil {
		return fmt.Errorf("%s: acquire: %w", k.name, err)
	}
	k.enter(p)
	hold()
	if i%3 == 0 {
		inner, err := sem.Acquire(p.Context())
		if err == nil && (inner.Token() != p.Token() || inner.Slot() != p.Slot() || inner.Depth() != 2) {
			err = fmt.Errorf("%s: permit reentry: token %d slot %d depth %d, outer %d slot %d",
				k.name, inner.Token(), inner.Slot(), inner.Depth(), p.Token(), p.Slot())
		}
		if inner != nil {
			err = errors.Join(err, inner.Unlock(ctx))
		}
		if err != nil {
			k.leave(p)
			return errors.Join(err, p.Unlock(ctx))
		}
	}
	err = p.Err()
	k.leave(p)
	return errors.Join(err, p.Unlock(ctx))
}

// verify reports the load's errors and each lock's checks, and that every
// name is free with nobody waiting: no call was left stuck or queued.
func (w *sharedLoad) verify(t *testing.T, c *reentrant.Client) string {
	t.Helper()
	for _, err := range w.errs {
		t.Errorf("call failed: %v", err)
	}
	var parts []string
	ctx := t.Context()
	for _, k := range w.rw {
		writes, reads := k.verify(t)
		st, err := c.RWMutex(k.name).Inspect(ctx)
		require.NoError(t, err)
		assert.True(t, !st.Held && st.Waiters == 0 && len(st.Holders) == 0, "%s left: %+v", k.name, st)
		parts = append(parts, fmt.Sprintf("%d/%d", writes, reads))
	}
	for _, k := range w.sem {
		n := k.verify(t)
		st, err := c.Semaphore(k.name, sharedPermits).Inspect(ctx)
		require.NoError(t, err)
		assert.True(t, !st.Held && st.Waiters == 0 && len(st.Holders) == 0, "%s left: %+v", k.name, st)
		parts = append(parts, fmt.Sprint(n))
	}
	return fmt.Sprintf("rounds=%d writes/reads=%s permits=%s", w.done.Load(),
		strings.Join(parts[:len(w.rw)], ","), strings.Join(parts[len(w.rw):], ","))
}

// sharedName is a name of a read-write lock ('w') or a semaphore ('s').
type sharedName struct {
	name string
	kind byte
}

// slot is the hash slot of every key of the name.
func (n sharedName) slot() int {
	return hashslot.Of(scripts.SharedKeys(prefix, n.name, n.kind, "").Base)
}

// keyPrefix is the prefix of every key of the name's kind.
func (n sharedName) keyPrefix() string {
	if n.kind == 's' {
		return prefix + scripts.SemPrefix + ":"
	}
	return prefix + scripts.RWPrefix + ":"
}

// checkSharedKey checks that key, seen on node s, belongs to one of names
// and lies in its slot, and (when c is given) that s serves that slot. A
// key naming no name by its tag must be a floor (":f") of a slot of one of
// the names of its kind.
func checkSharedKey(t *testing.T, c *redisproc.Cluster, s *redisproc.Server, names []sharedName, key string) {
	t.Helper()
	slot := hashslot.Of(key)
	owner := -1
	for _, n := range names {
		if !strings.HasPrefix(key, n.keyPrefix()) {
			continue
		}
		if strings.Contains(key, scripts.HashTag(n.name)) {
			owner = n.slot()
			break
		}
		if strings.HasSuffix(key, ":f") && slot == n.slot() && owner < 0 {
			owner = slot
		}
	}
	if owner < 0 {
		t.Errorf("%s: key %q belongs to no name of the test", s.Addr(), key)
		return
	}
	if slot != owner {
		t.Errorf("%s: key %q is in slot %d, its name's keys in slot %d", s.Addr(), key, slot, owner)
	}
	if c != nil && c.MasterOf(slot) != s {
		t.Errorf("%s: key %q of slot %d is not on the slot's primary %s", s.Addr(), key, slot, c.MasterOf(slot).Addr())
	}
}

// scanShared returns, per primary, every key under the tests' prefix, from
// SCAN: the tests that call it make read-write locks and semaphores only.
func scanShared(t *testing.T, c *redisproc.Cluster) map[*redisproc.Server][]string {
	t.Helper()
	out := map[*redisproc.Server][]string{}
	for _, m := range c.Masters() {
		it := m.Client().Scan(t.Context(), 0, prefix+":*", 100).Iterator()
		for it.Next(t.Context()) {
			out[m] = append(out[m], it.Val())
		}
		require.NoError(t, it.Err())
	}
	return out
}

// keyWatch records every key of the tests' prefix that a primary's
// keyspace notifications name (every write, scripts' included, and every
// expiry), with the node that sent it: the keys a name made, however
// briefly they lived.
type keyWatch struct {
	mu   sync.Mutex
	keys map[string]map[*redisproc.Server]bool
	subs []*redis.PubSub
	wg   sync.WaitGroup
}

func watchKeys(t *testing.T, c *redisproc.Cluster) *keyWatch {
	t.Helper()
	w := &keyWatch{keys: map[string]map[*redisproc.Server]bool{}}
	t.Cleanup(w.close)
	const ch = "__keyspace@0__:"
	for _, m := range c.Nodes() {
		rdb := m.Client()
		require.NoError(t, rdb.ConfigSet(t.Context(), "notify-keyspace-events", "KA").Err())
		ps := rdb.PSubscribe(t.Context(), ch+prefix+":*")
		_, err := ps.Receive(t.Context()) // the confirmation
		require.NoError(t, err)
		w.subs = append(w.subs, ps)
		msgs := ps.Channel(redis.WithChannelSize(4096))
		w.wg.Go(func() {
			for msg := range msgs {
				key := strings.TrimPrefix(msg.Channel, ch)
				w.mu.Lock()
				if w.keys[key] == nil {
					w.keys[key] = map[*redisproc.Server]bool{}
				}
				w.keys[key][m] = true
				w.mu.Unlock()
			}
		})
	}
	return w
}

func (w *keyWatch) close() {
	for _, ps := range w.subs {
		_ = ps.Close()
	}
	w.subs = nil
	w.wg.Wait()
}

// check checks every key seen so far (checkSharedKey; c nil: not which
// node held it, for a slot that moved; the tests that watch make read-write
// locks and semaphores only) and returns how many there were.
func (w *keyWatch) check(t *testing.T, c *redisproc.Cluster, names []sharedName) int {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for key, nodes := range w.keys {
		n++
		for s := range nodes {
			checkSharedKey(t, c, s, names, key)
		}
	}
	return n
}

// waitWaiters waits until Inspect (of the read-write lock, or of the
// semaphore) counts n waiters.
func waitWaiters(t *testing.T, inspect func(context.Context) (reentrant.State, error), n int64, what string) {
	t.Helper()
	var last reentrant.State
	ok := assert.Eventually(t, func() bool {
		st, err := inspect(t.Context())
		last = st
		return err == nil && st.Waiters == n
	}, sharedCeiling, 5*time.Millisecond, "%s: %d waiters", what, n)
	if !ok {
		t.Fatalf("%s: last state %+v", what, last)
	}
}

// leaseResult is a waiting call's outcome.
type leaseResult struct {
	l   *reentrant.Lease
	err error
}

// goLock runs lock in a goroutine; its result comes on the channel.
func goLock(ctx context.Context, lock func(context.Context, ...reentrant.CallOption) (*reentrant.Lease, error)) chan leaseResult {
	ch := make(chan leaseResult, 1)
	go func() {
		l, err := lock(ctx)
		ch <- leaseResult{l, err}
	}()
	return ch
}

// permitResult is a waiting Acquire's outcome.
type permitResult struct {
	p   *reentrant.Permit
	err error
}

// goAcquire runs sem.Acquire in a goroutine; its result comes on the
// channel.
func goAcquire(ctx context.Context, sem *reentrant.Semaphore) chan permitResult {
	ch := make(chan permitResult, 1)
	go func() {
		p, err := sem.Acquire(ctx)
		ch <- permitResult{p, err}
	}()
	return ch
}

// handedPermit waits for a waiting Acquire's permit, within sharedCeiling.
func handedPermit(t *testing.T, ch chan permitResult, what string) *reentrant.Permit {
	t.Helper()
	select {
	case r := <-ch:
		require.NoError(t, r.err, what)
		require.NotNil(t, r.p, what)
		return r.p
	case <-time.After(sharedCeiling):
		t.Fatalf("%s: not handed a permit within %v", what, sharedCeiling)
		return nil
	}
}

// handedShared waits for a waiting call's lease, within sharedCeiling.
func handedShared(t *testing.T, ch chan leaseResult, what string) *reentrant.Lease {
	t.Helper()
	select {
	case r := <-ch:
		require.NoError(t, r.err, what)
		require.NotNil(t, r.l, what)
		return r.l
	case <-time.After(sharedCeiling):
		t.Fatalf("%s: not handed the lease within %v", what, sharedCeiling)
		return nil
	}
}

// notYet checks that a waiting call is still waiting.
func notYet[T any](t *testing.T, ch chan T, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: returned %+v while it should wait", what, r)
	default:
	}
}

// rwHandoffs plays one read-write lock's handoffs: holders' client a
// holds the write lease; waiters' client b queues two readers, a writer
// and a reader behind it. The first release admits both readers at the
// epoch, the readers' release admits the writer with a token above, and
// its release the last reader, at its token. Every token is above above.
// check, when given, runs while a writer holds and a reader waits. It
// returns the highest token seen.
func rwHandoffs(t *testing.T, a, b *reentrant.Client, name string, above fence.Token, check func()) fence.Token {
	t.Helper()
	ctx := t.Context()
	rwA, rwB := a.RWMutex(name), b.RWMutex(name)
	w1, err := rwA.Lock(ctx)
	require.NoError(t, err)
	assert.Greater(t, w1.Token(), above, "%s: the first write token", name)
	_, err = rwB.TryRLock(ctx)
	require.ErrorIs(t, err, reentrant.ErrNotAcquired, "no reader while a writer holds")
	_, err = rwB.TryLock(ctx)
	require.ErrorIs(t, err, reentrant.ErrNotAcquired, "no second writer")
	r1 := goLock(ctx, rwB.RLock)
	waitWaiters(t, rwA.Inspect, 1, name)
	r2 := goLock(ctx, rwB.RLock)
	waitWaiters(t, rwA.Inspect, 2, name)
	w2 := goLock(ctx, rwB.Lock)
	waitWaiters(t, rwA.Inspect, 3, name)
	r3 := goLock(ctx, rwB.RLock)
	waitWaiters(t, rwA.Inspect, 4, name)

	require.NoError(t, w1.Unlock(ctx))
	l1, l2 := handedShared(t, r1, name+": first reader"), handedShared(t, r2, name+": second reader")
	assert.Equal(t, w1.Token(), l1.Token(), "%s: a reader reads the last writer's epoch", name)
	assert.Equal(t, w1.Token(), l2.Token(), "%s: a reader reads the last writer's epoch", name)
	notYet(t, w2, name+": the writer behind the readers")
	notYet(t, r3, name+": the reader behind the writer")
	st, err := rwA.Inspect(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 2, st.Waiters, "%s: the writer and the reader behind it wait", name)
	require.Len(t, st.Holders, 2, name)
	for _, h := range st.Holders {
		assert.Equal(t, "read", h.Meta, name)
		assert.Equal(t, w1.Token(), h.Token, name)
	}
	_, err = rwA.TryRLock(ctx)
	require.ErrorIs(t, err, reentrant.ErrNotAcquired, "%s: a new reader does not pass the waiting writer", name)

	require.NoError(t, l1.Unlock(ctx))
	notYet(t, w2, name+": the writer while a reader holds")
	require.NoError(t, l2.Unlock(ctx))
	l3 := handedShared(t, w2, name+": the writer")
	assert.Greater(t, l3.Token(), w1.Token(), "%s: the next write token", name)
	notYet(t, r3, name+": the reader behind the writer")
	st, err = rwA.Inspect(ctx)
	require.NoError(t, err)
	require.Len(t, st.Holders, 1, name)
	assert.Equal(t, "write", st.Holders[0].Meta, name)
	assert.Equal(t, l3.Token(), st.Token, name)
	if check != nil {
		check()
	}
	require.NoError(t, l3.Unlock(ctx))
	l4 := handedShared(t, r3, name+": the last reader")
	assert.Equal(t, l3.Token(), l4.Token(), "%s: the last reader reads the second writer's epoch", name)

	// A downgrade: the writer's owner reads at its token, then lets the
	// write lease go; readers come in, writers do not.
	require.NoError(t, l4.Unlock(ctx))
	w5, err := rwA.Lock(ctx)
	require.NoError(t, err)
	assert.Greater(t, w5.Token(), l3.Token(), name)
	r5, err := rwA.RLock(w5.Context())
	require.NoError(t, err, "%s: the writer's owner reads at once", name)
	assert.Equal(t, w5.Token(), r5.Token(), name)
	require.NoError(t, w5.Unlock(ctx))
	r6, err := rwB.TryRLock(ctx)
	require.NoError(t, err, "%s: a reader after the downgrade", name)
	_, err = rwB.TryLock(ctx)
	require.ErrorIs(t, err, reentrant.ErrNotAcquired, "%s: no writer while readers hold", name)
	_, err = rwA.Lock(r5.Context())
	require.ErrorIs(t, err, reentrant.ErrInvalid, "%s: a reader's owner may not upgrade", name)
	require.NoError(t, r5.Unlock(ctx))
	require.NoError(t, r6.Unlock(ctx))
	st, err = rwA.Inspect(ctx)
	require.NoError(t, err)
	assert.True(t, !st.Held && st.Waiters == 0, "%s: free: %+v", name, st)
	return w5.Token()
}

// semHandoffs plays one semaphore's handoffs: a's two permits, b's three
// waiters, each handed the slot a release frees, with a token above every
// earlier one, and above above. check, when given, runs while the permits
// are held and two calls wait. It returns the highest token seen.
func semHandoffs(t *testing.T, a, b *reentrant.Client, name string, above fence.Token, check func()) fence.Token {
	t.Helper()
	ctx := t.Context()
	semA, semB := a.Semaphore(name, sharedPermits), b.Semaphore(name, sharedPermits)
	p1, err := semA.Acquire(ctx)
	require.NoError(t, err)
	p2, err := semA.Acquire(ctx)
	require.NoError(t, err)
	assert.ElementsMatch(t, []int{0, 1}, []int{p1.Slot(), p2.Slot()}, name)
	assert.NotEqual(t, p1.Token(), p2.Token(), name)
	assert.Greater(t, min(p1.Token(), p2.Token()), above, "%s: the first permits' tokens", name)
	_, err = semB.TryAcquire(ctx)
	require.ErrorIs(t, err, reentrant.ErrNotAcquired, "%s: no third permit", name)
	_, err = b.Semaphore(name, sharedPermits+1).TryAcquire(ctx)
	require.ErrorIs(t, err, reentrant.ErrInvalid, "%s: another count while live", name)
	q1 := goAcquire(ctx, semB)
	waitWaiters(t, semA.Inspect, 1, name)
	q2 := goAcquire(ctx, semB)
	waitWaiters(t, semA.Inspect, 2, name)
	q3 := goAcquire(ctx, semB)
	waitWaiters(t, semA.Inspect, 3, name)

	top := max(p1.Token(), p2.Token())
	require.NoError(t, p2.Unlock(ctx))
	l1 := handedPermit(t, q1, name+": first waiter")
	assert.Equal(t, p2.Slot(), l1.Slot(), "%s: the first waiter holds the slot the release freed", name)
	assert.Greater(t, l1.Token(), top, "%s: a permit's token is above every earlier one", name)
	st, err := semA.Inspect(ctx)
	require.NoError(t, err)
	require.Len(t, st.Holders, 2, name)
	for _, h := range st.Holders {
		assert.Equal(t, "permit", h.Meta, name)
		if h.Token == l1.Token() {
			assert.Equal(t, l1.Slot(), h.Slot, "%s: Inspect's slot of the handed permit", name)
		}
	}
	top = l1.Token()
	notYet(t, q2, name+": second waiter")
	if check != nil {
		check()
	}
	require.NoError(t, p1.Unlock(ctx))
	l2 := handedPermit(t, q2, name+": second waiter")
	assert.Equal(t, p1.Slot(), l2.Slot(), "%s: the second waiter holds the slot the release freed", name)
	assert.Greater(t, l2.Token(), top, name)
	top = l2.Token()
	require.NoError(t, l1.Unlock(ctx))
	l3 := handedPermit(t, q3, name+": third waiter")
	assert.Equal(t, l1.Slot(), l3.Slot(), "%s: the third waiter holds the slot the release freed", name)
	assert.Greater(t, l3.Token(), top, name)
	st, err = semA.Inspect(ctx)
	require.NoError(t, err)
	require.Len(t, st.Holders, 2, name)
	slots := []int{st.Holders[0].Slot, st.Holders[1].Slot}
	assert.ElementsMatch(t, []int{0, 1}, slots, "%s: two permits, two slots", name)
	require.NoError(t, l2.Unlock(ctx))
	require.NoError(t, l3.Unlock(ctx))
	st, err = semA.Inspect(ctx)
	require.NoError(t, err)
	assert.True(t, !st.Held && st.Waiters == 0, "%s: free: %+v", name, st)
	return l3.Token()
}

// handedRoom are the options of the tests' other clients: a lease handed
// by a release's message holds, until its first renewal confirms, for the
// claim time only (half the handoff timeout, 500 ms by default), and a
// Cluster moving the slot refuses that renewal (TRYAGAIN) for the whole
// move, so a lease handed just before or during a move longer than the
// claim time is lost (ErrUnconfirmed; Redis, which granted the hold for
// the claim time too, lets it expire). A claim time of 2 s outlasts the
// moves here, and a renewal a loaded machine sends late.
var handedRoom = []reentrant.ClientOption{reentrant.WithHandoffTimeout(clusterHandoff)}

// minutePolling are the options of a waiters' client that polls once a
// minute (as runClusterHandoffs'): a waiter handed a lease within
// sharedCeiling was woken by its message (or by its subscription's
// confirmation), never by a poll.
var minutePolling = []reentrant.ClientOption{reentrant.WithHandoffTimeout(clusterHandoff),
	reentrant.WithTTL(2 * time.Minute), reentrant.WithRetry(reentrant.LinearBackoff(time.Minute))}

// A read-write lock and a semaphore on each primary of a real cluster:
// waiters handed the lease by each release, on every primary; then readers,
// writers and permit takers of two clients at once. The holders never see
// a writer beside anyone, nor more permits than the count, nor one slot
// twice; write tokens rise, reads read the last write's epoch, each slot's
// tokens rise; and every key a name made, as the primaries' keyspace
// notifications name them, lies in the name's slot on its primary.
func TestClusterRWMutexAndSemaphore(t *testing.T) {
	t.Parallel() // see TestMain
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{})
	watch := watchKeys(t, c)
	quick := newClient(t, c.Client(), handedRoom...)
	slow := newClient(t, c.Client(), minutePolling...)

	// Per primary, a read-write lock and a semaphore, with names whose
	// braces the keys escape.
	var names []sharedName
	for i, m := range c.Masters() {
		on := func(slot int) bool { return c.MasterOf(slot) == m }
		names = append(names,
			sharedName{testenv.NameWhere(prefix, fmt.Sprintf("rw}{%d", i), on), 'w'},
			sharedName{testenv.NameWhere(prefix, fmt.Sprintf("{sem}%d", i), on), 's'})
	}
	// checkLive checks the keys of every name while name holds and has
	// waiters: its hold, index and queue are there, on its primary.
	checkLive := func(n sharedName) func() {
		return func() {
			keys := scanShared(t, c)
			base := scripts.SharedKeys(prefix, n.name, n.kind, "").Base
			want := []string{base + ":q", base + ":h"} // a semaphore's queue and permits
			if n.kind == 'w' {
				want = []string{base, base + ":q", base + ":e"} // the writer, the queue, the epoch
			}
			assert.Subset(t, keys[c.MasterOf(n.slot())], want, "%q's live keys on its primary", n.name)
			for m, ks := range keys {
				for _, k := range ks {
					checkSharedKey(t, c, m, names, k)
				}
			}
		}
	}

	t.Run("handoffs", func(t *testing.T) {
		for _, n := range names {
			if n.kind == 'w' {
				rwHandoffs(t, quick, slow, n.name, 0, checkLive(n))
			} else {
				semHandoffs(t, quick, slow, n.name, 0, checkLive(n))
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Run("concurrent", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), sharedCeiling)
		defer cancel()
		load := &sharedLoad{clients: []*reentrant.Client{quick, slow}, rounds: 20}
		for _, n := range names {
			if n.kind == 'w' {
				load.rw = append(load.rw, &rwCheck{name: n.name})
			} else {
				load.sem = append(load.sem, newSemCheck(n.name))
			}
		}
		start := time.Now()
		load.run(ctx)
		took := time.Since(start)
		summary := load.verify(t, quick)
		t.Logf("SUMMARY cluster-shared %s took_ms=%d", summary, took.Milliseconds())
	})

	// Every key left (the floors, the epochs) and every key any call made.
	left := 0
	for m, ks := range scanShared(t, c) {
		for _, k := range ks {
			left++
			checkSharedKey(t, c, m, names, k)
		}
	}
	require.Eventually(t, func() bool {
		watch.mu.Lock()
		defer watch.mu.Unlock()
		for _, n := range names {
			if !watch.seen(n) {
				return false
			}
		}
		return true
	}, sharedCeiling, 10*time.Millisecond, "the notifications of every name's keys")
	watch.close()
	made := watch.check(t, c, names)
	t.Logf("SUMMARY cluster-shared-keys names=%d keys_made=%d keys_left=%d", len(names), made, left)
}

// seen reports whether a key of n's queue was notified (every name had a
// queue in the handoffs); w.mu held.
func (w *keyWatch) seen(n sharedName) bool {
	return w.keys[scripts.SharedKeys(prefix, n.name, n.kind, "").Base+":q"] != nil
}

// A read-write lock and a semaphore of one slot under concurrent calls
// while the slot moves to another primary, its keys two at a time: the
// holders still never see a writer beside anyone nor more permits than
// the count, tokens keep rising, every call returns (none stuck, none
// failed: the handed leases' claim time outlasts the move, see handedRoom)
// and both names end free, their keys on the new primary.
func TestClusterSharedMoveUnderConcurrentCalls(t *testing.T) {
	t.Parallel() // see TestMain
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{})
	watch := watchKeys(t, c)
	cc := c.Client()
	var refused atomic.Int64 // TRYAGAIN and ASK that go-redis gave up on: calls that met the move
	cc.AddHook(testenv.Hook{Done: func(_ []redis.Cmder, _ bool, err error) {
		if err != nil && (strings.HasPrefix(err.Error(), "TRYAGAIN") || strings.HasPrefix(err.Error(), "ASK")) {
			refused.Add(1)
		}
	}})
	quick := newClient(t, cc, handedRoom...)
	other := newClient(t, c.Client(), handedRoom...)
	pair, slot := testenv.SameSlot(prefix, fmt.Sprintf("smove{%d}", time.Now().UnixNano()), 2)
	names := []sharedName{{pair[0], 'w'}, {pair[1], 's'}}
	load := &sharedLoad{clients: []*reentrant.Client{quick, other},
		rw: []*rwCheck{{name: pair[0]}}, sem: []*semCheck{newSemCheck(pair[1])}}
	ctx, cancel := context.WithTimeout(t.Context(), sharedCeiling)
	defer cancel()
	finished := make(chan struct{})
	go func() {
		load.run(ctx)
		close(finished)
	}()
	defer func() {
		load.stop.Store(true)
		<-finished
	}()
	require.Eventually(t, func() bool { return load.done.Load() >= 30 }, sharedCeiling, time.Millisecond, "rounds before the move")
	from := c.MasterOf(slot)
	to := c.Masters()[0]
	if to == from {
		to = c.Masters()[1]
	}
	st := c.MigrateSlot(slot, to, 2, 50*time.Millisecond)
	after := load.done.Load()
	require.Eventually(t, func() bool { return load.done.Load() >= after+30 }, sharedCeiling, time.Millisecond, "rounds after the move")
	load.stop.Store(true)
	<-finished
	summary := load.verify(t, quick)
	assert.Positive(t, refused.Load(), "calls met the move")
	for m, ks := range scanShared(t, c) {
		for _, k := range ks {
			checkSharedKey(t, c, m, names, k)
		}
	}
	watch.close()
	made := watch.check(t, nil, names)
	t.Logf("SUMMARY cluster-shared-move keys=%d batches=%d migrate_ms=%d by_move_end=%d %s refused=%d keys_made=%d",
		st.Keys, st.Batches, st.Took.Milliseconds(), after, summary, refused.Load(), made)
}

// A read-write lock and a semaphore through Sentinel (go-redis's failover
// client): write and read leases, permits, and waiters handed each release;
// then a forced failover (SENTINEL FAILOVER) with a read lease and a permit
// held across it, after which those are still held and released, new calls
// work and hand off as before, and every token is above the tokens granted
// before the failover.
func TestSentinelRWMutexAndSemaphore(t *testing.T) {
	t.Parallel() // see TestMain
	g := redisproc.StartSentinels(t, 1, 1)
	rdb := g.Client()
	ctx := t.Context()
	quick := newClient(t, rdb, handedRoom...)
	slow := newClient(t, g.Client(), minutePolling...)
	base := testenv.Unique(t)
	rwName, semName := base+"/rw", base+"/sem"

	top := max(rwHandoffs(t, quick, slow, rwName, 0, nil), semHandoffs(t, quick, slow, semName, 0, nil))

	// Held across the failover: a read lease and a permit.
	reader, err := quick.RWMutex(rwName).RLock(ctx)
	require.NoError(t, err)
	permit, err := quick.Semaphore(semName, sharedPermits).Acquire(ctx)
	require.NoError(t, err)
	top = max(top, reader.Token(), permit.Token())

	wctx, cancel := context.WithTimeout(ctx, sharedCeiling)
	g.WaitReplicas(wctx) // the replica has every hold and token
	cancel()
	old := g.Primary()
	sc := redis.NewSentinelClient(&redis.Options{Addr: g.Addrs()[0], DisableIdentity: true})
	defer sc.Close()
	require.NoError(t, sc.Failover(ctx, redisproc.SentinelMasterName).Err())
	promoted := g.AwaitFailover(old)
	require.NotEqual(t, old, promoted)
	// The old primary, alive, follows the new one at once (Sentinel would
	// within 10 s): a write a client sent it before learning of the
	// failover is refused (READONLY, which go-redis retries), not lost.
	wctx, cancel = context.WithTimeout(ctx, sharedCeiling)
	g.WaitReplicas(wctx)
	cancel()

	// The holds survived: the read lease keeps writers out, the permit
	// holds one slot of two.
	require.NoError(t, reader.Err(), "the read lease held across the failover")
	require.NoError(t, permit.Err(), "the permit held across the failover")
	wait := goLock(ctx, slow.RWMutex(rwName).Lock)
	waitWaiters(t, quick.RWMutex(rwName).Inspect, 1, rwName+" after the failover")
	p2, err := slow.Semaphore(semName, sharedPermits).Acquire(ctx)
	require.NoError(t, err, "the second permit after the failover")
	assert.NotEqual(t, permit.Slot(), p2.Slot())
	assert.Greater(t, p2.Token(), top, "a permit after the failover")
	_, err = slow.Semaphore(semName, sharedPermits).TryAcquire(ctx)
	require.ErrorIs(t, err, reentrant.ErrNotAcquired, "the permit held across the failover still counts")
	require.NoError(t, reader.Unlock(ctx), "the read lease is released after the failover")
	w := handedShared(t, wait, rwName+": the writer after the failover")
	assert.Greater(t, w.Token(), top, "a write token after the failover")
	top = max(top, w.Token(), p2.Token())
	require.NoError(t, w.Unlock(ctx))
	require.NoError(t, permit.Unlock(ctx), "the permit is released after the failover")
	require.NoError(t, p2.Unlock(ctx))

	rwHandoffs(t, quick, slow, rwName, top, nil)
	semHandoffs(t, quick, slow, semName, top, nil)
	t.Logf("SUMMARY sentinel-shared old=%s new=%s unplanned=%d", old.Addr(), promoted.Addr(), g.Unplanned())
}

// slotMove moves a slot by hand, as MigrateSlot does, but stops between
// the steps: the test chooses which keys have moved when a call runs.
type slotMove struct {
	t        *testing.T
	c        *redisproc.Cluster
	slot     int
	src, dst *redisproc.Server
}

// startMove marks slot IMPORTING on another primary and MIGRATING on its own.
func startMove(t *testing.T, c *redisproc.Cluster, slot int) *slotMove {
	t.Helper()
	m := &slotMove{t: t, c: c, slot: slot, src: c.MasterOf(slot), dst: c.Masters()[0]}
	if m.dst == m.src {
		m.dst = c.Masters()[1]
	}
	ctx := t.Context()
	require.NoError(t, m.dst.Client().Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.ID(m.src)).Err())
	require.NoError(t, m.src.Client().Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", c.ID(m.dst)).Err())
	return m
}

// migrate moves keys to the importing primary.
func (m *slotMove) migrate(keys ...string) {
	m.t.Helper()
	_, port, err := net.SplitHostPort(m.dst.Addr())
	require.NoError(m.t, err)
	args := []any{"MIGRATE", "127.0.0.1", port, "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	require.NoError(m.t, m.src.Client().Do(m.t.Context(), args...).Err(), "MIGRATE %q", keys)
}

// finish moves the slot's other keys and gives the slot to the importing
// primary on every primary.
func (m *slotMove) finish() {
	m.t.Helper()
	ctx := m.t.Context()
	for {
		keys, err := m.src.Client().Do(ctx, "CLUSTER", "GETKEYSINSLOT", m.slot, 100).StringSlice()
		require.NoError(m.t, err)
		if len(keys) == 0 {
			break
		}
		m.migrate(keys...)
	}
	for _, s := range []*redisproc.Server{m.dst, m.src} {
		require.NoError(m.t, s.Client().Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.c.ID(m.dst)).Err())
	}
	for _, s := range m.c.Masters() {
		if s != m.src && s != m.dst {
			require.NoError(m.t, s.Client().Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.c.ID(m.dst)).Err())
		}
	}
}

// A write lease released while its slot moves, its hold and the floor on
// one primary and some of the keys the release names from them (the
// queue, the readers) on the other. The release names those keys itself,
// so Redis checks only the hold and the floor: run on the migrating
// primary it failed at the queue that had moved ("non local key"), its
// hold already deleted; run on the importing one it found no reader there
// and handed the lock to a queued writer beside a live read lease. The
// release now waits for the move (TRYAGAIN), then releases and hands on
// as usual.
func TestClusterWriteReleaseMidMove(t *testing.T) {
	t.Parallel() // see TestMain
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{})
	cc := c.Client()
	var refused atomic.Int64 // TRYAGAIN and ASK that go-redis gave up on
	cc.AddHook(testenv.Hook{Done: func(_ []redis.Cmder, _ bool, err error) {
		if err != nil && (strings.HasPrefix(err.Error(), "TRYAGAIN") || strings.HasPrefix(err.Error(), "ASK")) {
			refused.Add(1)
		}
	}})
	a := newClient(t, cc, handedRoom...)
	b := newClient(t, c.Client(), handedRoom...)
	ctx := t.Context()
	// unlockMidMove releases l while the slot is split, and finishes the
	// move once the release was refused (or returned).
	unlockMidMove := func(t *testing.T, l *reentrant.Lease, m *slotMove) error {
		t.Helper()
		before := refused.Load()
		done := make(chan error, 1)
		go func() { done <- l.Unlock(ctx) }()
		var err error
		returned := false
		require.Eventually(t, func() bool {
			select {
			case err = <-done:
				returned = true
			default:
			}
			return returned || refused.Load() > before
		}, sharedCeiling, time.Millisecond, "the release refused, or returned")
		m.finish()
		if !returned {
			err = <-done
		}
		return err
	}

	t.Run("queue-moved", func(t *testing.T) {
		name := fmt.Sprintf("midmove-q{%d}", time.Now().UnixNano())
		k := scripts.SharedKeys(prefix, name, 'w', "")
		w, err := a.RWMutex(name).Lock(ctx)
		require.NoError(t, err)
		got := goLock(ctx, b.RWMutex(name).RLock)
		waitWaiters(t, a.RWMutex(name).Inspect, 1, name)
		m := startMove(t, c, sharedName{name, 'w'}.slot())
		m.migrate(k.Base + ":q") // the hold and the floor stay
		require.NoError(t, unlockMidMove(t, w, m), "the write lease's release")
		r := handedShared(t, got, name+": the reader")
		assert.Equal(t, w.Token(), r.Token(), "the reader reads the write lease's epoch")
		require.NoError(t, r.Unlock(ctx))
		st, err := a.RWMutex(name).Inspect(ctx)
		require.NoError(t, err)
		assert.True(t, !st.Held && st.Waiters == 0, "free: %+v", st)
	})

	t.Run("readers-not-moved", func(t *testing.T) {
		name := fmt.Sprintf("midmove-r{%d}", time.Now().UnixNano())
		k := scripts.SharedKeys(prefix, name, 'w', "")
		w, err := a.RWMutex(name).Lock(ctx)
		require.NoError(t, err)
		r, err := a.RWMutex(name).RLock(w.Context()) // the downgrade
		require.NoError(t, err)
		got := goLock(ctx, b.RWMutex(name).Lock)
		waitWaiters(t, a.RWMutex(name).Inspect, 1, name)
		m := startMove(t, c, sharedName{name, 'w'}.slot())
		m.migrate(k.Base, k.Base+":q", k.Base+":e", k.Floor) // the readers stay
		require.NoError(t, unlockMidMove(t, w, m), "the write lease's release")
		st, err := a.RWMutex(name).Inspect(ctx)
		require.NoError(t, err)
		require.Len(t, st.Holders, 1, "the read lease alone holds: %+v", st.Holders)
		assert.Equal(t, "read", st.Holders[0].Meta)
		assert.EqualValues(t, 1, st.Waiters, "the writer waits")
		notYet(t, got, name+": the writer while the read lease holds")
		require.NoError(t, r.Err())
		require.NoError(t, r.Unlock(ctx))
		w2 := handedShared(t, got, name+": the writer")
		assert.Greater(t, w2.Token(), w.Token())
		require.NoError(t, w2.Unlock(ctx))
	})
}
