package reentrant_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// A permit's holder asking again with another count is refused, as any
// other caller is while the semaphore is live, and its permit is left as
// it was; with the count, it reenters.
func TestSemaphoreReentryWithAnotherCount(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := sharedClient(t, b)
		name := testenv.Unique(t)
		ctx := reentrant.WithOwner(t.Context(), reentrant.NewOwner())
		p, err := c.Semaphore(name, 2).Acquire(ctx)
		require.NoError(t, err)
		_, err = c.Semaphore(name, 3).TryAcquire(ctx)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		require.Contains(t, err.Error(), "2 permits")
		_, err = c.Semaphore(name, 1).Acquire(p.Context())
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		st, err := c.Semaphore(name, 2).Inspect(ctx)
		require.NoError(t, err)
		require.Len(t, st.Holders, 1)
		require.Equal(t, int64(1), st.Holders[0].Depth, "the refused calls took no level")
		again, err := c.Semaphore(name, 2).TryAcquire(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(2), again.Depth())
		require.Equal(t, p.Slot(), again.Slot())
		require.NoError(t, errors.Join(again.Unlock(context.Background()), p.Unlock(context.Background())))
	})
}
