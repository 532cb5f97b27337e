package lua_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/hashslot"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
)

// A sharded waiter is told with SPUBLISH on its shard channel, a classic
// one with PUBLISH; the member records which. (Real Redis 7: miniredis has
// no SPUBLISH, and the standalone path never asks for it.)
func TestShardedWaiterIsToldWithSPUBLISH(t *testing.T) {
	r := newQueueRig(t, testenv.Redis(t))
	ch := "redfence:c:" + hashslot.Tag(hashslot.Of(r.k.Lock)) + ":" + testenv.Unique(t)
	ps := r.rdb.SSubscribe(r.ctx, ch)
	defer ps.Close()
	_, err := ps.Receive(r.ctx)
	require.NoError(t, err)

	first := r.acquire("o1", "l1", nil)
	w := &lua.Waiter{Channel: ch, Claim: 5 * time.Second, Queue: time.Minute, Sharded: true}
	require.False(t, r.acquire("o2", "l2", w).OK)
	q := r.rdb.ZRange(r.ctx, r.k.Queue, 0, -1).Val()
	require.Len(t, q, 1)
	require.True(t, strings.HasSuffix(q[0], "\ns"+ch), "member %q records a shard channel", q[0])

	require.Zero(t, r.release("o1", first.Token, "l1"))
	select {
	case m := <-ps.Channel():
		require.Equal(t, ch, m.Channel)
		require.Equal(t, "l2 2", m.Payload)
	case <-time.After(2 * time.Second):
		t.Fatal("no SPUBLISH on the waiter's shard channel")
	}
	ch2, _ := r.message()
	require.Empty(t, ch2, "nothing on classic channels")
}
