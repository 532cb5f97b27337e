package reentrant_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// The semantics of RWMutex and Semaphore, call by call, on real Redis and
// miniredis. The rapid machines at the root check the invariants at random.

func sharedClient(t *testing.T, b testenv.Backend, opts ...reentrant.ClientOption) *reentrant.Client {
	t.Helper()
	c, err := reentrant.New(b.Client, append([]reentrant.ClientOption{reentrant.WithPrefix(testenv.Unique(t))}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitFor waits, up to a generous ceiling, for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 30*time.Second, 5*time.Millisecond, what)
}

func TestRWExclusionAndTokens(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, ctx := sharedClient(t, b), t.Context()
		m := c.RWMutex("doc")
		r0, err := m.RLock(ctx) // no write yet: a fresh token
		require.NoError(t, err)
		require.NotEqual(t, fence.None, r0.Token())
		_, err = m.TryLock(ctx)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired, "a reader excludes a writer")
		require.NoError(t, r0.Unlock(ctx))

		w, err := m.Lock(ctx)
		require.NoError(t, err)
		require.Greater(t, w.Token(), r0.Token(), "a write token is above every earlier token, reads included")
		_, err = m.TryRLock(ctx)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		require.Contains(t, err.Error(), "a writer holds it")
		_, err = m.TryLock(ctx)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired, "a writer excludes a writer")
		require.NoError(t, w.Unlock(ctx))

		r1, err := m.RLock(ctx)
		require.NoError(t, err)
		r2, err := m.TryRLock(ctx)
		require.NoError(t, err, "readers share")
		require.Equal(t, w.Token(), r1.Token(), "a read lease's token is the epoch")
		require.Equal(t, w.Token(), r2.Token())
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.True(t, st.Held)
		require.Len(t, st.Holders, 2)
		for _, h := range st.Holders {
			require.Equal(t, "read", h.Meta)
			require.Equal(t, w.Token(), h.Token)
		}
		require.NoError(t, r1.Unlock(ctx))
		require.NoError(t, r2.Unlock(ctx))
		st, err = m.Inspect(ctx)
		require.NoError(t, err)
		require.False(t, st.Held)
	})
}

func TestRWReentryDowngradeUpgrade(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, ctx := sharedClient(t, b), t.Context()
		m := c.RWMutex("doc")
		w, err := m.Lock(ctx)
		require.NoError(t, err)
		w2, err := m.Lock(w.Context())
		require.NoError(t, err)
		require.Equal(t, w.Token(), w2.Token())
		require.EqualValues(t, 2, w2.Depth())

		// A writer queues behind the held write lease; the holder's owner
		// still reads at once (a downgrade), with the write's token.
		queued := make(chan error, 1)
		go func() {
			l, err := m.Lock(ctx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			queued <- err
		}()
		waitFor(t, "the writer to queue", func() bool { st, _ := m.Inspect(ctx); return st.Waiters == 1 })
		r, err := m.RLock(w.Context())
		require.NoError(t, err)
		require.Equal(t, w.Token(), r.Token())
		require.NoError(t, w2.Unlock(ctx))
		require.NoError(t, w.Unlock(ctx))
		select {
		case err := <-queued:
			t.Fatalf("a writer got in past a live reader: %v", err)
		case <-time.After(50 * time.Millisecond):
		}

		// The reader's owner may not upgrade: two would deadlock.
		_, err = m.Lock(r.Context())
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		require.Contains(t, err.Error(), "upgrade")
		_, err = m.TryLock(r.Context())
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		// A reader reenters even with a writer waiting.
		r2, err := m.RLock(r.Context())
		require.NoError(t, err)
		require.EqualValues(t, 2, r2.Depth())
		require.NoError(t, r2.Unlock(ctx))
		require.NoError(t, r.Unlock(ctx))
		require.NoError(t, <-queued, "the queued writer gets the lock once the last reader leaves")
	})
}

// A waiting writer holds back the readers that come after it; when it
// releases, the readers queued behind it are admitted together.
func TestRWWriterPreferenceAndBatchedReaders(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, ctx := sharedClient(t, b), t.Context()
		m := c.RWMutex("doc")
		r, err := m.RLock(ctx)
		require.NoError(t, err)
		wch := make(chan *reentrant.Lease, 1)
		go func() {
			l, err := m.Lock(ctx)
			if err != nil {
				t.Error(err)
			}
			wch <- l
		}()
		waitFor(t, "the writer to queue", func() bool { st, _ := m.Inspect(ctx); return st.Waiters == 1 })
		_, err = m.TryRLock(ctx)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired, "a waiting writer stops new readers")
		readers := make(chan *reentrant.Lease, 3)
		for range 3 {
			go func() {
				l, err := m.RLock(ctx)
				if err != nil {
					t.Error(err)
				}
				readers <- l
			}()
		}
		waitFor(t, "the readers to queue", func() bool { st, _ := m.Inspect(ctx); return st.Waiters == 4 })
		require.NoError(t, r.Unlock(ctx))
		w := <-wch
		require.NotNil(t, w)
		require.Greater(t, w.Token(), r.Token())
		require.Len(t, readers, 0)
		require.NoError(t, w.Unlock(ctx))
		for range 3 {
			l := <-readers
			require.Equal(t, w.Token(), l.Token(), "readers after the write read its epoch")
			defer func() { require.NoError(t, l.Unlock(ctx)) }()
		}
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.Len(t, st.Holders, 3, "the three readers hold together")
	})
}

// A cancelled wait leaves nothing queued, and an expired holder's waiters
// are admitted by their polls.
func TestRWCancelledWaitAndExpiry(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, ctx := sharedClient(t, b), t.Context()
		m := c.RWMutex("doc", reentrant.WithTTL(time.Second), reentrant.WithoutRenewal())
		w, err := m.Lock(ctx)
		require.NoError(t, err)
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err = m.RLock(short)
		cancel()
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.Zero(t, st.Waiters, "the cancelled reader left the queue")

		// The writer's lease runs out without Unlock: a waiting reader
		// gets in.
		r, err := m.RLock(ctx)
		require.NoError(t, err)
		require.Equal(t, w.Token(), r.Token())
		require.ErrorIs(t, w.Err(), reentrant.ErrLost)
		require.NoError(t, r.Unlock(ctx))
	})
}

func TestSemaphorePermitsAndSlots(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, ctx := sharedClient(t, b), t.Context()
		s := c.Semaphore("pool", 3)
		var ps []*reentrant.Permit
		slots := map[int]bool{}
		for range 3 {
			p, err := s.Acquire(ctx)
			require.NoError(t, err)
			require.False(t, slots[p.Slot()], "slot %d twice", p.Slot())
			require.Less(t, p.Slot(), 3)
			slots[p.Slot()] = true
			ps = append(ps, p)
		}
		_, err := s.TryAcquire(ctx)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		require.Contains(t, err.Error(), "all 3 permits")
		again, err := s.Acquire(ps[1].Context())
		require.NoError(t, err, "an owner's second call reenters its permit")
		require.Equal(t, ps[1].Slot(), again.Slot())
		require.Equal(t, ps[1].Token(), again.Token())
		require.NoError(t, again.Unlock(ctx))

		for _, n := range []int{2, 4} {
			_, err = c.Semaphore("pool", n).TryAcquire(ctx)
			require.ErrorIs(t, err, reentrant.ErrInvalid, "another count while live")
			require.Contains(t, err.Error(), "3 permits")
		}
		st, err := s.Inspect(ctx)
		require.NoError(t, err)
		require.Len(t, st.Holders, 3)

		// A freed slot goes to the oldest waiter, with a higher token.
		got := make(chan *reentrant.Permit, 1)
		go func() {
			p, err := s.Acquire(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- p
		}()
		waitFor(t, "the waiter to queue", func() bool { st, _ := s.Inspect(ctx); return st.Waiters == 1 })
		require.NoError(t, ps[1].Unlock(ctx))
		p := <-got
		require.Equal(t, ps[1].Slot(), p.Slot(), "the freed slot, as the claim says")
		st, err = s.Inspect(ctx)
		require.NoError(t, err)
		for _, h := range st.Holders {
			if h.Owner == string(p.Owner()) {
				require.Equal(t, p.Slot(), h.Slot, "the slot Redis holds for it")
			}
		}
		require.Greater(t, p.Token(), ps[2].Token(), "above every earlier token of the name, hence of the slot")
		require.Equal(t, fmt.Sprintf("k#slot%d", p.Slot()), p.SlotKey("k"))
		for _, q := range []*reentrant.Permit{ps[0], ps[2], p} {
			require.NoError(t, q.Unlock(ctx))
		}
		// Every permit has ended: the next call sets the count.
		q, err := c.Semaphore("pool", 5).Acquire(ctx)
		require.NoError(t, err)
		require.NoError(t, q.Unlock(ctx))
	})
}

func TestSharedBadInput(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, ctx := sharedClient(t, b), t.Context()
		for _, n := range []int{0, -1, 1<<14 + 1} {
			_, err := c.Semaphore("pool", n).Acquire(ctx)
			require.ErrorIs(t, err, reentrant.ErrInvalid, "%d permits", n)
			require.Contains(t, err.Error(), fmt.Sprint(n))
		}
		_, err := c.RWMutex("").RLock(ctx)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		_, err = c.Semaphore("", 1).TryAcquire(ctx)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		var nilRW *reentrant.RWMutex
		_, err = nilRW.Lock(ctx)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		var nilSem *reentrant.Semaphore
		_, err = nilSem.Acquire(ctx)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		_, err = c.RWMutex("x").Lock(nil) //nolint:staticcheck // a nil ctx is bad input
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		var zero reentrant.Client
		_, err = zero.RWMutex("x").TryRLock(ctx)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		require.NoError(t, c.Close())
		_, err = c.Semaphore("pool", 1).Acquire(ctx)
		require.ErrorIs(t, err, reentrant.ErrClosed)
	})
}

func TestRedlockRefusesSharedLocks(t *testing.T) {
	_, nodes := redlockNodes(t, 3)
	c := newRedlock(t, nodes)
	ctx := t.Context()
	_, err := c.RWMutex("doc").Lock(ctx)
	require.ErrorIs(t, err, reentrant.ErrInvalid)
	require.Contains(t, err.Error(), "Redlock")
	_, err = c.Semaphore("pool", 2).TryAcquire(ctx)
	require.ErrorIs(t, err, reentrant.ErrInvalid)
	_, err = c.RWMutex("doc").Inspect(ctx)
	require.ErrorIs(t, err, reentrant.ErrInvalid)
	require.False(t, errors.Is(err, reentrant.ErrNotAcquired))
}
