package reentrant_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// A waiting writer at the head of the queue holds back the readers behind
// it; when it gives up, they could read at once beside the live readers,
// but nothing admitted them before their next poll.
func TestReviewCancelledHeadWriterAdmitsReaders(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		// Polls every 2 s: an admission before then is the undo's.
		c, _ := reviewClient(t, b, reentrant.WithHandoffTimeout(8*time.Second))
		ctx := t.Context()
		m := c.RWMutex("doc")
		r0, err := m.RLock(ctx)
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		werr := make(chan error, 1)
		go func() {
			_, err := m.Lock(wctx)
			werr <- err
		}()
		reviewWait(t, "the writer to queue", func() bool { st, _ := m.Inspect(ctx); return st.Waiters == 1 })
		rch := make(chan *reentrant.Lease, 1)
		go func() {
			l, err := m.RLock(ctx)
			if err != nil {
				t.Error(err)
			}
			rch <- l
		}()
		reviewWait(t, "the reader to queue", func() bool { st, _ := m.Inspect(ctx); return st.Waiters == 2 })
		time.Sleep(50 * time.Millisecond) // the reader's first attempt is done
		cancel()
		require.ErrorIs(t, <-werr, reentrant.ErrNotAcquired)
		select {
		case r := <-rch:
			require.NoError(t, r.Unlock(ctx))
		case <-time.After(time.Second):
			t.Fatal("the reader behind a writer that left was not admitted")
		}
		require.NoError(t, r0.Unlock(ctx))
	})
}
