//go:build unix

package reentrant_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/hashslot"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/redisproc"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

// WithReplicaAck on a ClusterClient: the acquire script and WAIT go to the
// primary of the lock's slot (MasterForKey) on one connection, on every
// primary; a waiter handed the lock claims it and waits for its replica;
// after a slot moves, the stale route is answered MOVED and the call is
// retried at the new primary; a replica that stops acknowledging makes
// acquisitions fail with ErrNotReplicated.
func TestClusterReplicaAck(t *testing.T) {
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{Replicas: 1})
	ctx := t.Context()
	const ack = 500 * time.Millisecond
	lc := newClient(t, c.Client(), reentrant.WithReplicaAck(1, ack))
	other := newClient(t, c.Client(), reentrant.WithReplicaAck(1, ack))
	onReplica := func(m *redisproc.Server, name string) fence.Token {
		conn := c.ReplicasOf(m)[0].Client().Conn()
		defer conn.Close()
		require.NoError(t, conn.ReadOnly(ctx).Err())
		v, err := conn.HGet(ctx, lua.KeysFor(prefix, name).Lock, "t").Uint64()
		require.NoError(t, err)
		return fence.Token(v)
	}
	nameOn := func(m *redisproc.Server) string {
		for i := 0; ; i++ {
			name := fmt.Sprintf("ack{%d}-%d", time.Now().UnixNano(), i)
			if c.MasterOf(hashslot.Of(lua.KeysFor(prefix, name).Lock)) == m {
				return name
			}
		}
	}

	for _, m := range c.Masters() {
		name := nameOn(m)
		l, err := lc.Lock(ctx, name)
		require.NoError(t, err, m.Addr())
		require.GreaterOrEqual(t, onReplica(m, name), l.Token(), "an acknowledged token is on the replica")
		// A waiter handed the lock claims it in Redis, and waits for the
		// replica before it returns.
		type result struct {
			l   *reentrant.Lease
			err error
		}
		waited := make(chan result, 1)
		go func() {
			// No require here: FailNow in another goroutine would leave
			// the test waiting below instead of failing it.
			w, err := other.Lock(ctx, name)
			waited <- result{w, err}
		}()
		require.Eventually(t, func() bool {
			st, err := lc.Inspect(ctx, name)
			return err == nil && st.Waiters == 1
		}, 5*time.Second, 5*time.Millisecond)
		require.NoError(t, l.Unlock(ctx))
		var w *reentrant.Lease
		select {
		case r := <-waited:
			require.NoError(t, r.err, "the waiter")
			w = r.l
		case <-time.After(30 * time.Second):
			t.Fatal("the waiter never got the lock")
		}
		require.Equal(t, l.Token()+1, w.Token())
		require.GreaterOrEqual(t, onReplica(m, name), w.Token())
		require.NoError(t, w.Unlock(ctx))
	}

	// The slot moves: the acked path's connection to the old primary is
	// answered MOVED, and the retry goes to the new one.
	m := c.Masters()[0]
	name := nameOn(m)
	l, err := lc.Lock(ctx, name)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	dst := c.Masters()[1]
	c.MigrateSlot(hashslot.Of(lua.KeysFor(prefix, name).Lock), dst, 10, 0)
	l, err = lc.Lock(ctx, name)
	require.NoError(t, err, "after the move")
	require.GreaterOrEqual(t, onReplica(dst, name), l.Token())
	require.NoError(t, l.Unlock(ctx))

	// The replica stops acknowledging: the acquisition is undone.
	r := c.ReplicasOf(dst)[0]
	r.Isolate()
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = lc.TryLock(tctx, name)
	require.ErrorIs(t, err, reentrant.ErrNotReplicated)
	r.Resume()
	st, err := lc.Inspect(ctx, name)
	require.NoError(t, err)
	require.False(t, st.Held, "an unacknowledged acquisition is undone")
}
