//go:build unix

package redisstore_test

import (
	"fmt"
	"testing"

	"github.com/redfence/redfence/internal/hashslot"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/redisstore"
	"github.com/redfence/redfence/storage/storagetest"
)

// The conformance suite through a ClusterClient on a real three-primary
// cluster: every script names one key, whatever the key holds.
func TestConformanceCluster(t *testing.T) {
	cc := redisproc.StartCluster(t, redisproc.ClusterConfig{}).Client()
	storagetest.Run(t, func(t *testing.T) storage.Store {
		s, err := redisstore.New(cc, redisstore.WithPrefix("redfence:test:"+testenv.Unique(t)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// Records spread over every primary, each in the slot of the lock of the
// same name; a record whose slot moves keeps its value and its fence.
func TestClusterRecordsSpreadAndMove(t *testing.T) {
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{})
	cc := c.Client()
	ctx := t.Context()
	s, err := redisstore.New(cc, redisstore.WithPrefix("redfence"))
	require.NoError(t, err)
	for i := range 300 {
		key := fmt.Sprintf("k{%d}%%", i)
		require.NoError(t, s.Put(ctx, key, []byte(key), 5))
		rk, err := s.Key(key)
		require.NoError(t, err)
		require.Equal(t, hashslot.Of(scripts.KeysFor("redfence", key).Lock), hashslot.Of(rk), "a record shares its lock's slot")
	}
	for _, m := range c.Masters() {
		n, err := m.Client().DBSize(ctx).Result()
		require.NoError(t, err)
		require.Positive(t, n, "%s holds no record", m.Addr())
	}

	const key = "k{7}%"
	rk, err := s.Key(key)
	require.NoError(t, err)
	slot := hashslot.Of(rk)
	dst := c.Masters()[0]
	if dst == c.MasterOf(slot) {
		dst = c.Masters()[1]
	}
	c.MigrateSlot(slot, dst, 10, 0)
	rec, err := s.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, storage.Record{Value: []byte(key), Token: 5}, rec)
	require.ErrorIs(t, s.Put(ctx, key, []byte("old"), 4), fence.ErrStale, "the fence moved with the record")
	require.NoError(t, s.Put(ctx, key, []byte("new"), 6))
}
