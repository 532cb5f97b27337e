//go:build unix

package reentrant_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/redisproc"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/reentrant"
)

// The renewer works on a Cluster client: go-redis splits each tick's
// pipeline by node, and leases on every node stay alive.
func TestRenewerOnCluster(t *testing.T) {
	const n, ttl = 300, 600 * time.Millisecond
	cc := startCluster(t, 3)
	var perNode sync.Map // addr -> *atomic.Int64
	cc.OnNewNode(func(node *redis.Client) {
		ctr, _ := perNode.LoadOrStore(node.Options().Addr, &atomic.Int64{})
		node.AddHook(testenv.Hook{Sent: func(_ []redis.Cmder, pipe bool) {
			if pipe {
				ctr.(*atomic.Int64).Add(1)
			}
		}})
	})
	c := newClient(t, cc, reentrant.WithTTL(ttl))
	leases := lockMany(t, c, n)
	time.Sleep(3 * ttl)
	for _, l := range leases {
		require.NoError(t, l.Err())
	}
	nodes := 0
	perNode.Range(func(addr, ctr any) bool {
		if ctr.(*atomic.Int64).Load() > 0 {
			nodes++
		}
		t.Logf("%s: %d pipelines", addr, ctr.(*atomic.Int64).Load())
		return true
	})
	require.Equal(t, 3, nodes, "every node must have received renewal pipelines")
}

// startCluster starts a Redis Cluster of n primaries on loopback and
// returns a client of it, closed when the test ends.
func startCluster(t *testing.T, n int) *redis.ClusterClient {
	t.Helper()
	return redisproc.StartCluster(t, redisproc.ClusterConfig{Masters: n}).Client()
}
