//go:build unix

package lua_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/redisproc"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
)

// go-redis computes slots in an internal package, so the authority here is
// Redis itself: a cluster-enabled redis-server answers CLUSTER KEYSLOT.
// Every key of a lock must land in one slot, whatever the name, and the
// test's CRC16 must agree with the server's.
func TestKeysShareOneSlotOnRealCluster(t *testing.T) {
	srv := redisproc.Start(t, redisproc.WithArgs("--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf"))
	rdb := srv.Client()
	for _, name := range awkwardNames {
		k := lua.KeysFor("redfence", name)
		want, err := rdb.ClusterKeySlot(t.Context(), k.Lock).Result()
		require.NoError(t, err)
		require.EqualValues(t, testenv.Slot(k.Lock), want, "CRC16 disagrees with Redis for %q", k.Lock)
		for _, key := range []string{k.Queue, k.Counter} {
			got, err := rdb.ClusterKeySlot(t.Context(), key).Result()
			require.NoError(t, err)
			require.Equal(t, want, got, "name %q: %s and %s in different slots", name, k.Lock, key)
		}
	}
}
