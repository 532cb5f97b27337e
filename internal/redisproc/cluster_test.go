//go:build unix

package redisproc_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/redisproc"
	"github.com/redfence/redfence/internal/testenv"
)

// A cluster of three primaries with a replica each: every slot served,
// a slot moved with its keys, a graceful failover and a SIGKILL failover,
// and every process gone once the test ends.
func TestClusterMigrateAndFailover(t *testing.T) {
	var pids []int
	t.Run("scenario", func(t *testing.T) {
		c := redisproc.StartCluster(t, redisproc.ClusterConfig{Replicas: 1, NodeTimeout: time.Second})
		for _, s := range c.Nodes() {
			pids = append(pids, s.PID())
		}
		ctx := t.Context()
		masters := c.Masters()
		require.Len(t, masters, 3)
		for _, m := range masters {
			require.Len(t, c.ReplicasOf(m), 1, "replicas of %s", m.Addr())
			c.ReplicasOf(m)[0].WaitSync(ctx) // a cluster replica knows its primary
		}
		cc := c.Client()

		// Slot moves carry their keys; batches of one split them.
		const tag = "{redisproc}"
		slot := testenv.Slot(tag)
		src := c.MasterOf(slot)
		for i := range 5 {
			require.NoError(t, cc.Set(ctx, fmt.Sprintf("%s:%d", tag, i), i, 0).Err())
		}
		dst := masters[0]
		if dst == src {
			dst = masters[1]
		}
		st := c.MigrateSlot(slot, dst, 1, 0)
		assert.Equal(t, 5, st.Keys)
		assert.Equal(t, 5, st.Batches)
		assert.Equal(t, dst, c.MasterOf(slot))
		n, err := src.Client().DBSize(ctx).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "the source keeps no key of the moved slot")
		for i := range 5 {
			v, err := cc.Get(ctx, fmt.Sprintf("%s:%d", tag, i)).Int()
			require.NoError(t, err)
			assert.Equal(t, i, v)
		}

		// Graceful failover: the replica takes over, the old primary follows.
		r := c.ReplicasOf(dst)[0]
		took := c.Failover(r)
		t.Logf("CLUSTER FAILOVER took %v", took)
		assert.Equal(t, r, c.MasterOf(slot))
		assert.Equal(t, []*redisproc.Server{dst}, c.ReplicasOf(r))

		// SIGKILL: the old primary, now a replica again, is elected.
		require.NoError(t, cc.Do(ctx, "WAIT", 1, 2000).Err())
		promoted, took := c.KillMaster(r)
		t.Logf("SIGKILL failover took %v", took)
		assert.Equal(t, dst, promoted)
		assert.Equal(t, dst, c.MasterOf(slot))
		require.Eventually(t, func() bool {
			// go-redis goes on dialing the dead primary until it reloads
			// the slots, which nothing else makes it do here.
			cc.ReloadState(ctx)
			v, err := cc.Get(ctx, tag+":4").Int()
			return err == nil && v == 4
		}, 10*time.Second, 20*time.Millisecond, "the key survives the failover")
		require.Len(t, c.Masters(), 3)
	})
	for _, pid := range pids {
		assert.False(t, alive(pid), "redis-server pid %d left running", pid)
	}
}
