package reentrant_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// A reader's owner whose read call queued behind its own write call is
// admitted by the downgrade rule on a poll, but its queue entry stayed
// behind; the release of the write lease then "admitted" that entry again,
// rewriting the live read hold's expiry to the handoff's claim time, so the
// hold vanished from Redis while its lease went on, and a writer got in
// beside a live reader.
func TestReviewDowngradeLeavesNoQueueEntry(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		if b.Mini != nil {
			t.Skip("waits on real expiry")
		}
		c, _ := reviewClient(t, b, reentrant.WithHandoffTimeout(200*time.Millisecond))
		ctx := t.Context()
		m := c.RWMutex("doc")
		r0, err := m.RLock(ctx)
		require.NoError(t, err)
		octx := reentrant.WithOwner(ctx, "o")
		wch, rch := make(chan *reentrant.Lease, 1), make(chan *reentrant.Lease, 1)
		go func() {
			l, err := m.Lock(octx)
			if err != nil {
				t.Error(err)
			}
			wch <- l
		}()
		reviewWait(t, "the writer to queue", func() bool { st, _ := m.Inspect(ctx); return st.Waiters == 1 })
		go func() {
			l, err := m.RLock(octx)
			if err != nil {
				t.Error(err)
			}
			rch <- l
		}()
		reviewWait(t, "the reader to queue", func() bool { st, _ := m.Inspect(ctx); return st.Waiters == 2 })
		require.NoError(t, r0.Unlock(ctx))
		w, r := <-wch, <-rch
		require.NotNil(t, w)
		require.NotNil(t, r)
		require.Equal(t, w.Token(), r.Token(), "a downgrade reads the write's epoch")
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		require.Zero(t, st.Waiters, "the reader admitted by the downgrade left the queue")

		require.NoError(t, w.Unlock(ctx))
		time.Sleep(300 * time.Millisecond) // past the claim time (100 ms)
		require.NoError(t, r.Err(), "the read lease lives")
		if w2, err := m.TryLock(ctx); err == nil {
			_ = w2.Unlock(ctx)
			t.Fatal("a writer got in beside a live reader")
		}
		ttl, err := r.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, ttl, 5*time.Second, "the live read hold keeps its lease")
		require.NoError(t, r.Unlock(ctx))
	})
}
