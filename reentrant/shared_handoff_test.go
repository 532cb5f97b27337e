package reentrant_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// A permit handed to a waiter by a release's message knows the slot it was
// handed: the one the release freed, as Inspect says, not slot 0. The
// message carries the slot beside the token, so the waiter takes the
// permit from it, as a lock's waiter does, with no claim in Redis: no
// acquire script is answered between the release and the grant. The first
// round subscribes the waiters' client; the later ones are handed by
// message. A long handoff timeout keeps the waiter's polls (a quarter of
// it) out of the way.
func TestHandedPermitKnowsItsSlot(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, name := t.Context(), testenv.Unique(t)
		var n atomic.Int64 // sacquire scripts answered
		rdb := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
		t.Cleanup(func() { _ = rdb.Close() })
		rdb.AddHook(testenv.Hook{Done: func(cmds []redis.Cmder, pipe bool, err error) {
			for _, cmd := range cmds {
				if !pipe && scripts.Ran("sacquire", cmd, err) {
					n.Add(1)
				}
			}
		}})
		sem := newClient(t, rdb, reentrant.WithHandoffTimeout(8*time.Second)).Semaphore(name, 2)
		p0, err := sem.Acquire(ctx)
		require.NoError(t, err)
		held, err := sem.Acquire(ctx)
		require.NoError(t, err)
		require.Equal(t, []int{0, 1}, []int{p0.Slot(), held.Slot()})
		for i := range 3 {
			before := n.Load()
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
				return err == nil && st.Waiters == 1 && n.Load() > before
			}, 20*time.Second, time.Millisecond)
			before = n.Load()
			require.NoError(t, held.Unlock(ctx))
			p := <-got
			require.NotNil(t, p)
			if i > 0 {
				require.Equal(t, before, n.Load(), "round %d: acquire scripts answered after the handoff", i)
			}
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
