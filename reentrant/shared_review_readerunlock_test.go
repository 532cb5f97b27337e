package reentrant_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// A read lease whose hold Redis lost (an operator's DEL), after which a
// writer took the lock: its Unlock cannot know its read was released, as a
// lock's cannot once someone took it since; it answered nil ("released").
func TestReviewReaderUnlockAfterWriterIsUnconfirmed(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, p := reviewClient(t, b)
		ctx := t.Context()
		m := c.RWMutex("doc")
		r, err := m.RLock(ctx)
		require.NoError(t, err)
		require.NoError(t, b.Client.Del(ctx, p+":rw:{doc}:r:"+string(r.Owner())).Err())
		w, err := m.TryLock(ctx)
		require.NoError(t, err)
		require.Greater(t, w.Token(), r.Token())
		require.NoError(t, w.Unlock(ctx))
		err = r.Unlock(ctx)
		require.ErrorIs(t, err, reentrant.ErrNotHeld, "a writer took the lock since the read hold was lost")

		// With no writer since, a hold found gone is what a retried
		// release finds after its first attempt: released.
		r, err = m.RLock(ctx)
		require.NoError(t, err)
		require.NoError(t, b.Client.Del(ctx, p+":rw:{doc}:r:"+string(r.Owner())).Err())
		require.NoError(t, r.Unlock(ctx))
	})
}
