package reentrant_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// A permit handed to a waiter by a release's message knows the slot it was
// handed: the one the release freed, as Inspect says, not slot 0. The
// message carries the token only, so the waiter claims a permit in Redis,
// whose reply has the slot. The first round subscribes the waiters'
// client; the later ones are handed by message.
func TestHandedPermitKnowsItsSlot(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, name := t.Context(), testenv.Unique(t)
		sem := newClient(t, b.Client).Semaphore(name, 2)
		p0, err := sem.Acquire(ctx)
		require.NoError(t, err)
		held, err := sem.Acquire(ctx)
		require.NoError(t, err)
		require.Equal(t, []int{0, 1}, []int{p0.Slot(), held.Slot()})
		for i := range 3 {
			got := make(chan *reentrant.Permit, 1)
			go func() {
				p, err := sem.Acquire(ctx)
				if err != nil {
					t.Error(err)
				}
				got <- p
			}()
			require.Eventually(t, func() bool {
				st, err := sem.Inspect(ctx)
				return err == nil && st.Waiters == 1
			}, 20*time.Second, time.Millisecond)
			require.NoError(t, held.Unlock(ctx))
			p := <-got
			require.NotNil(t, p)
			require.Greater(t, p.Token(), held.Token())
			require.Equal(t, 1, p.Slot(), "round %d: the slot the release freed", i)
			require.Equal(t, "k#slot1", p.SlotKey("k"))
			st, err := sem.Inspect(ctx)
			require.NoError(t, err)
			for _, h := range st.Holders {
				if h.Token == p.Token() {
					require.Equal(t, 1, h.Slot, "round %d: Inspect's slot of the handed permit", i)
				}
			}
			held = p
		}
		require.NoError(t, held.Unlock(ctx))
		require.NoError(t, p0.Unlock(ctx))
	})
}
