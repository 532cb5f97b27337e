package reentrant_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/testenv"
)

// Readers that crashed leave their owners in the readers' set (nothing
// expires it); the next script that reads the set drops them all with one
// SREM of unpack(gone), and Lua's unpack stops at 8000 values: past that,
// every writer's acquisition failed, and nothing could clean the set. The
// same for a semaphore's permits.
func TestReviewManyCrashedHolders(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, p := reviewClient(t, b)
		ctx := t.Context()
		const n = 9000
		owners := make([]any, n)
		permits := make([]any, 0, 2*n)
		for i := range owners {
			owners[i] = fmt.Sprintf("crashed-%d", i)
			permits = append(permits, owners[i], fmt.Sprintf("%d 16384", i))
		}
		// What n readers, and n permit holders, that died leave behind.
		require.NoError(t, b.Client.SAdd(ctx, p+":rw:{doc}:r", owners...).Err())
		require.NoError(t, b.Client.HSet(ctx, p+":sem:{pool}:h", permits...).Err())

		w, err := c.RWMutex("doc").TryLock(ctx)
		require.NoError(t, err)
		require.NoError(t, w.Unlock(ctx))
		require.Zero(t, b.Client.Exists(ctx, p+":rw:{doc}:r").Val(), "the crashed readers were dropped")

		s, err := c.Semaphore("pool", 16384).TryAcquire(ctx)
		require.NoError(t, err)
		require.Zero(t, s.Slot())
		require.NoError(t, s.Unlock(ctx))
		require.Zero(t, b.Client.Exists(ctx, p+":sem:{pool}:h").Val(), "the crashed permits were dropped")
	})
}
