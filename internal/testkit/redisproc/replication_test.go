//go:build unix

package redisproc_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/redisproc"
)

// replicatedK starts a primary, with opts, and its replica, and sets k to 1
// on the primary, replicated: the start of every failover story here.
func replicatedK(t *testing.T, opts ...redisproc.Option) (primary, replica *redisproc.Server) {
	t.Helper()
	primary = redisproc.Start(t, opts...)
	replica = redisproc.Start(t, redisproc.WithReplicaOf(primary))
	require.NoError(t, primary.Client().Set(t.Context(), "k", 1, 0).Err())
	replica.WaitSync(t.Context())
	return primary, replica
}

// The failover of the package doc: the replica is promoted without the write
// the dead primary acknowledged, so the counter goes backwards.
func TestFailoverLosesUnreplicatedWrite(t *testing.T) {
	t.Parallel()
	primary, replica := replicatedK(t, redisproc.WithAOF("always"))
	p, r := primary.Client(), replica.Client()
	n, err := r.Get(t.Context(), "k").Int()
	require.NoError(t, err)
	require.Equal(t, 1, n, "replica before isolation")

	replica.Isolate()
	n64, err := p.Incr(t.Context(), "k").Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, n64, "primary acknowledged the write")
	primary.Kill()
	replica.Resume()
	replica.Promote()

	n, err = r.Get(t.Context(), "k").Int()
	require.NoError(t, err)
	assert.Equal(t, 1, n, "promoted replica must lack the unreplicated INCR")
	require.NoError(t, r.Set(t.Context(), "after", 1, 0).Err(), "promoted replica takes writes")
}

// Why Isolate exists: with SIGSTOP alone the write sent to the frozen
// replica waits in its socket buffer and is applied once it resumes. (A
// Promote right after Resume races with reading that buffer, so the test
// waits until the replica has read its link to the end.)
func TestPauseAloneStillDeliversWrites(t *testing.T) {
	t.Parallel()
	primary, replica := replicatedK(t)
	p, r := primary.Client(), replica.Client()
	replica.Pause()
	require.NoError(t, p.Incr(t.Context(), "k").Err())
	// A reply to a later command means the event loop has flushed the
	// INCR to the replica's socket.
	require.NoError(t, p.Ping(t.Context()).Err())
	primary.Kill()
	replica.Resume()
	require.Eventually(t, func() bool {
		return strings.Contains(r.Info(t.Context(), "replication").Val(), "master_link_status:down")
	}, time.Minute, 5*time.Millisecond)
	replica.Promote()

	n, err := r.Get(t.Context(), "k").Int()
	require.NoError(t, err)
	assert.Equal(t, 2, n, "the replica applied what was buffered while it was stopped")
}

// Resuming an isolated replica while its primary lives resyncs it.
func TestIsolateThenResumeResyncs(t *testing.T) {
	t.Parallel()
	primary, replica := replicatedK(t)
	p, r := primary.Client(), replica.Client()
	replica.Isolate()
	require.NoError(t, p.Incr(t.Context(), "k").Err())
	replica.Resume()
	replica.WaitSync(t.Context())

	n, err := r.Get(t.Context(), "k").Int()
	require.NoError(t, err)
	assert.Equal(t, 2, n)
}

// ReplicaOf at runtime, and a restarted replica stays one.
func TestReplicaOfAndRestart(t *testing.T) {
	t.Parallel()
	primary := redisproc.Start(t)
	replica := redisproc.Start(t)
	require.NoError(t, primary.Client().Set(t.Context(), "k", "v", 0).Err())

	replica.ReplicaOf(primary)
	replica.WaitSync(t.Context())
	r := replica.Client()
	v, err := r.Get(t.Context(), "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", v)

	replica.Kill()
	require.NoError(t, primary.Client().Set(t.Context(), "k", "w", 0).Err())
	replica.Restart()
	replica.WaitSync(t.Context())
	v, err = r.Get(t.Context(), "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "w", v)
}

// WaitAcked returns once WAIT counts the replica: a write right after it is
// acknowledged by one replica without waiting.
func TestWaitAcked(t *testing.T) {
	t.Parallel()
	primary := redisproc.Start(t)
	replica := redisproc.Start(t, redisproc.WithReplicaOf(primary))
	replica.WaitSync(t.Context())
	primary.WaitAcked(t.Context(), 1)
	p := primary.Client()
	pipe := p.Pipeline()
	pipe.Set(t.Context(), "k", 1, 0)
	acked := pipe.Do(t.Context(), "WAIT", 1, 5000)
	_, err := pipe.Exec(t.Context())
	require.NoError(t, err)
	n, err := acked.Int64()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}
