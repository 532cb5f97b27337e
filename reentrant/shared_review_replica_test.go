//go:build unix

package reentrant_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// With WithReplicaAck, an attempt that is not a poll runs the script and
// WAIT in one pipeline (scripts.AcquireAcked), which ran the lock's
// acquire.lua whatever the keys' kind: a read lease was granted beside a
// writer, a writer beside readers, and permits past the count, each as a
// plain lock on the hold's key.
func TestReviewReplicaAckSharedExclusion(t *testing.T) {
	t.Parallel() // see TestMain
	primary, _ := primaryWithReplica(t)
	c := newClient(t, primary.Client(), reentrant.WithReplicaAck(1, 2*time.Second))
	ctx := t.Context()
	name := testenv.Unique(t)

	m := c.RWMutex(name)
	w, err := m.Lock(ctx)
	require.NoError(t, err)
	if r, err := m.TryRLock(ctx); err == nil {
		_ = r.Unlock(ctx)
		t.Fatal("a read lease beside a live writer")
	}
	require.NoError(t, w.Unlock(ctx))
	r, err := m.RLock(ctx)
	require.NoError(t, err)
	require.Equal(t, w.Token(), r.Token(), "a read lease carries the epoch")
	if w2, err := m.TryLock(ctx); err == nil {
		_ = w2.Unlock(ctx)
		t.Fatal("a writer beside a live reader")
	}
	require.NoError(t, r.Unlock(ctx))

	s := c.Semaphore(name, 1)
	p, err := s.Acquire(ctx)
	require.NoError(t, err)
	if q, err := s.TryAcquire(ctx); err == nil {
		_ = q.Unlock(ctx)
		t.Fatal("two permits of a semaphore of one")
	}
	require.NoError(t, p.Unlock(ctx))
}
