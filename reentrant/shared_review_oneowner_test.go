package reentrant_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// Two waiting Acquire calls of one owner: the doc says an owner holds at
// most one permit, and a second call reenters it. dispatch gave the second
// call a second slot and token in the same hold, overwriting the first's
// slot in the permits' hash: the first's slot was then free for anyone,
// while the first permit still held it.
func TestReviewOneOwnerTwoWaitingPermits(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, _ := reviewClient(t, b)
		ctx := t.Context()
		s := c.Semaphore("pool", 3)
		var held []*reentrant.Permit
		for range 3 {
			p, err := s.Acquire(ctx)
			require.NoError(t, err)
			held = append(held, p)
		}
		octx := reentrant.WithOwner(ctx, "o")
		got := make(chan *reentrant.Permit, 2)
		acquire := func() {
			p, err := s.Acquire(octx)
			if err != nil {
				t.Error(err)
			}
			got <- p
		}
		go acquire()
		reviewWait(t, "the first call to queue", func() bool { st, _ := s.Inspect(ctx); return st.Waiters == 1 })
		go acquire()
		reviewWait(t, "the second call to queue", func() bool { st, _ := s.Inspect(ctx); return st.Waiters == 2 })
		require.NoError(t, held[0].Unlock(ctx))
		a := <-got
		require.NotNil(t, a)
		require.NoError(t, held[1].Unlock(ctx))
		bp := <-got
		require.NotNil(t, bp)
		require.Equal(t, a.Token(), bp.Token(), "one owner, one permit: the second call reenters")
		require.Equal(t, a.Slot(), bp.Slot())
		require.NoError(t, a.Err())
		require.NoError(t, bp.Err())
		// Another owner takes the free permit: never a slot the owner o holds.
		d, err := s.TryAcquire(ctx)
		require.NoError(t, err)
		require.NotEqual(t, a.Slot(), d.Slot(), "two live permits on one slot")
		require.NotEqual(t, held[2].Slot(), d.Slot())
		for _, p := range []*reentrant.Permit{a, bp, d, held[2]} {
			require.NoError(t, p.Unlock(ctx))
		}
	})
}
