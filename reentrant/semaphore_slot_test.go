package reentrant_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// A permit handed to a waiter by a release (the handoff message) has the
// slot Redis gave it, as Inspect shows, not slot 0: two live permits never
// report the same slot, so their SlotKeys differ.
func TestSemaphoreHandedPermitKeepsItsSlot(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := newClient(t, b.Client)
		sem := c.Semaphore(testenv.Unique(t), 2)
		p0, err := sem.Acquire(t.Context())
		require.NoError(t, err)
		p1, err := sem.Acquire(t.Context())
		require.NoError(t, err)
		require.Equal(t, []int{0, 1}, []int{p0.Slot(), p1.Slot()})

		got := make(chan *reentrant.Permit, 1)
		errs := make(chan error, 1)
		go func() {
			p, err := sem.Acquire(context.Background())
			errs <- err
			got <- p
		}()
		require.Eventually(t, func() bool {
			st, err := sem.Inspect(t.Context())
			return err == nil && st.Waiters == 1
		}, 10*time.Second, 2*time.Millisecond, "waiting for the third Acquire to queue")
		require.NoError(t, p1.Unlock(t.Context())) // frees slot 1 and hands it on
		require.NoError(t, <-errs)
		p2 := <-got
		t.Cleanup(func() { _ = p2.Unlock(context.Background()) })

		st, err := sem.Inspect(t.Context())
		require.NoError(t, err)
		slots := map[string]int{}
		for _, h := range st.Holders {
			slots[string(h.Owner)] = h.Slot
		}
		require.Equal(t, map[string]int{string(p0.Owner()): 0, string(p2.Owner()): 1}, slots)
		require.Equal(t, 1, p2.Slot(), "the handed permit's Slot, Redis holds it on slot 1")
		require.NotEqual(t, p0.SlotKey("k"), p2.SlotKey("k"))
		require.NoError(t, p0.Unlock(t.Context()))
	})
}
