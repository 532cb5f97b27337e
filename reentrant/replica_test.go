//go:build unix

package reentrant_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/redisproc"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

// With WithReplicaAck, a token is handed out only once a replica has it, so
// a failover to that replica cannot issue it again; without enough
// acknowledgements the acquisition is undone and no token leaves Redis.
func TestReplicaAckSurvivesFailover(t *testing.T) {
	primary, replica := primaryWithReplica(t)
	ctx := t.Context()
	c := newClient(t, primary.Client(), reentrant.WithReplicaAck(1, 2*time.Second))
	name := testenv.Unique(t)
	k := lua.KeysFor(prefix, name)

	var handed fence.Token
	for range 3 {
		l, err := c.Lock(ctx, name)
		require.NoError(t, err)
		handed = l.Token()
		got, err := replica.Client().HGet(ctx, k.Lock, "t").Uint64()
		require.NoError(t, err)
		require.GreaterOrEqual(t, fence.Token(got), handed, "an acknowledged token must already be on the replica")
		require.NoError(t, l.Unlock(ctx))
	}

	// The replica stops acknowledging: acquisitions fail and are undone.
	replica.Isolate()
	for range 2 {
		_, err := c.TryLock(ctx, name)
		require.ErrorIs(t, err, reentrant.ErrNotReplicated)
	}
	st, err := c.Inspect(ctx, name)
	require.NoError(t, err)
	require.False(t, st.Held, "an unacknowledged acquisition must be undone")
	require.Greater(t, st.LastToken, handed, "the primary issued tokens that were never handed out")

	// The primary dies with those increments; the replica takes over.
	primary.Kill()
	replica.Resume()
	replica.Promote()
	after := newClient(t, replica.Client())
	l, err := after.Lock(ctx, name)
	require.NoError(t, err)
	require.Greater(t, l.Token(), handed, "a token handed out before the failover was issued again")
	require.NoError(t, l.Unlock(ctx))
}

func TestReplicaAckBadInput(t *testing.T) {
	_, rdb := testenv.Mini(t)
	for _, opt := range []reentrant.ClientOption{
		reentrant.WithReplicaAck(0, time.Second), reentrant.WithReplicaAck(65, time.Second),
		reentrant.WithReplicaAck(1, 0), reentrant.WithReplicaAck(1, 1500*time.Microsecond),
		reentrant.WithReplicaAck(1, rdb.Options().ReadTimeout), // not below the client's ReadTimeout
	} {
		_, err := reentrant.New(rdb, opt)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": rdb.Options().Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	_, err := reentrant.New(ring, reentrant.WithReplicaAck(1, time.Second))
	require.ErrorIs(t, err, reentrant.ErrInvalid, "a Ring cannot run WAIT on the script's connection")
	c, err := reentrant.New(rdb, reentrant.WithReplicaAck(1, time.Second))
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

// The same failover without WithReplicaAck: a token handed out by the old
// primary is issued again by the promoted replica. This is what the option
// prevents, and why stores must compare tokens with >= rather than trust
// them to be unique.
func TestWithoutReplicaAckFailoverRepeatsTokens(t *testing.T) {
	primary, replica := primaryWithReplica(t)
	ctx := t.Context()
	c := newClient(t, primary.Client())
	name := testenv.Unique(t)

	replica.Isolate()
	l, err := c.Lock(ctx, name)
	require.NoError(t, err)
	handed := l.Token()
	primary.Kill()
	replica.Resume()
	replica.Promote()
	after := newClient(t, replica.Client())
	again, err := after.Lock(ctx, name)
	require.NoError(t, err)
	require.LessOrEqual(t, again.Token(), handed, "expected the unreplicated token to be issued again")
}

// primaryWithReplica starts a primary and a replica and returns once the
// primary counts the replica for WAIT: after the initial sync the replica
// is not "online" until its first REPLCONF ACK, and WAIT would answer 0.
func primaryWithReplica(t *testing.T) (primary, replica *redisproc.Server) {
	primary = redisproc.Start(t)
	replica = redisproc.Start(t, redisproc.WithReplicaOf(primary))
	replica.WaitSync(t.Context())
	primary.WaitAcked(t.Context(), 1)
	return primary, replica
}
