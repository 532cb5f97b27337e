package reentrant_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// Defects found in review of the read-write lock and the semaphore: each
// test fails on the code as it was reviewed.

func reviewClient(t *testing.T, b testenv.Backend, opts ...reentrant.ClientOption) (*reentrant.Client, string) {
	t.Helper()
	p := testenv.Unique(t)
	c, err := reentrant.New(b.Client, append([]reentrant.ClientOption{reentrant.WithPrefix(p)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, p
}

func reviewWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 20*time.Second, 2*time.Millisecond, what)
}

// A waiter handed a permit by a release's message takes it without a
// claim in Redis (takeHanded), and the message says nothing of the slot:
// the permit reported slot 0 whatever slot it holds, so two live permits
// wrote the keys of slot 0.
func TestReviewHandedPermitKnowsItsSlot(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, _ := reviewClient(t, b)
		ctx := t.Context()
		s := c.Semaphore("pool", 2)
		for range 3 {
			p0, err := s.Acquire(ctx)
			require.NoError(t, err)
			p1, err := s.Acquire(ctx)
			require.NoError(t, err)
			// Release the permit that is not on slot 0.
			keep, free := p0, p1
			if p0.Slot() != 0 {
				keep, free = p1, p0
			}
			got := make(chan *reentrant.Permit, 1)
			go func() {
				p, err := s.Acquire(ctx)
				if err != nil {
					t.Error(err)
				}
				got <- p
			}()
			reviewWait(t, "the waiter to queue", func() bool { st, _ := s.Inspect(ctx); return st.Waiters == 1 })
			require.NoError(t, free.Unlock(ctx))
			p := <-got
			require.NotNil(t, p)
			st, err := s.Inspect(ctx)
			require.NoError(t, err)
			inRedis := -1
			for _, h := range st.Holders {
				if h.Owner == string(p.Owner()) {
					inRedis = h.Slot
				}
			}
			require.Equal(t, free.Slot(), inRedis, "Redis gave the waiter the freed slot")
			require.Equal(t, inRedis, p.Slot(), "the permit must report the slot Redis gave it")
			require.NotEqual(t, keep.Slot(), p.Slot(), "two live permits on one slot")
			require.NoError(t, p.Unlock(ctx))
			require.NoError(t, keep.Unlock(ctx))
		}
	})
}
