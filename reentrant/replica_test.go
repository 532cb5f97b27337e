//go:build unix

package reentrant_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/hashslot"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// With WithReplicaAck, a token is handed out only once a replica has it, so
// a failover to that replica cannot issue it again; without enough
// acknowledgements the acquisition is undone and no token leaves Redis.
func TestReplicaAckSurvivesFailover(t *testing.T) {
	t.Parallel() // see TestMain
	primary, replica := primaryWithReplica(t)
	ctx := t.Context()
	c := newClient(t, primary.Client(), reentrant.WithReplicaAck(1, 2*time.Second))
	name := testenv.Unique(t)
	k := scripts.KeysFor(prefix, name)

	var handed fence.Token
	for range 3 {
		l, err := c.Lock(ctx, name)
		require.NoError(t, err)
		handed = l.Token()
		got, err := lockToken(ctx, replica.Client(), k.Lock)
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
	after := failOver(t, primary, replica)
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

// The same failover without WithReplicaAck, with WithStrictTokens: a token
// handed out by the old primary is issued again by the promoted replica.
// This is what the option prevents (and time tokens, the default: see
// TestDefaultTokensSurviveLostData), and why stores must compare tokens
// with >= rather than trust them to be unique.
func TestWithoutReplicaAckFailoverRepeatsTokens(t *testing.T) {
	primary, replica := primaryWithReplica(t)
	ctx := t.Context()
	c := newClient(t, primary.Client(), reentrant.WithStrictTokens())
	name := testenv.Unique(t)

	replica.Isolate()
	l, err := c.Lock(ctx, name)
	require.NoError(t, err)
	handed := l.Token()
	after := failOver(t, primary, replica, reentrant.WithStrictTokens())
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

// WithReplicaAck on a ClusterClient: the acquire script and WAIT go to the
// primary of the lock's slot (MasterForKey) on one connection, on every
// primary; a waiter handed the lock claims it and waits for its replica;
// after a slot moves, the stale route is answered MOVED and the call is
// retried at the new primary; a replica that stops acknowledging makes
// acquisitions fail with ErrNotReplicated.
func TestClusterReplicaAck(t *testing.T) {
	t.Parallel() // see TestMain
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{Replicas: 1})
	ctx := t.Context()
	// The ack timeout is a ceiling: a healthy replica answers WAIT at once,
	// but one just synced counts only after its first REPLCONF ACK (within
	// a second), later on a loaded machine.
	const ack = 3 * time.Second
	lc := newClient(t, c.Client(), reentrant.WithReplicaAck(1, ack))
	other := newClient(t, c.Client(), reentrant.WithReplicaAck(1, ack))
	onReplica := func(m *redisproc.Server, name string) fence.Token {
		conn := c.ReplicasOf(m)[0].Client().Conn()
		defer conn.Close()
		require.NoError(t, conn.ReadOnly(ctx).Err())
		v, err := lockToken(ctx, conn, scripts.KeysFor(prefix, name).Lock)
		require.NoError(t, err)
		return fence.Token(v)
	}
	nameOn := func(m *redisproc.Server) string {
		for i := 0; ; i++ {
			name := fmt.Sprintf("ack{%d}-%d", time.Now().UnixNano(), i)
			if c.MasterOf(hashslot.Of(scripts.KeysFor(prefix, name).Lock)) == m {
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
		}, time.Minute, 5*time.Millisecond)
		require.NoError(t, l.Unlock(ctx))
		var w *reentrant.Lease
		select {
		case r := <-waited:
			require.NoError(t, r.err, "the waiter")
			w = r.l
		case <-time.After(30 * time.Second):
			t.Fatal("the waiter never got the lock")
		}
		require.Greater(t, w.Token(), l.Token())
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
	c.MigrateSlot(hashslot.Of(scripts.KeysFor(prefix, name).Lock), dst, 10, 0)
	l, err = lc.Lock(ctx, name)
	require.NoError(t, err, "after the move")
	require.GreaterOrEqual(t, onReplica(dst, name), l.Token())
	require.NoError(t, l.Unlock(ctx))

	// The replica stops acknowledging: the acquisition is undone.
	r := c.ReplicasOf(dst)[0]
	r.Isolate()
	tctx, cancel := context.WithTimeout(ctx, 10*ack)
	defer cancel()
	_, err = lc.TryLock(tctx, name)
	require.ErrorIs(t, err, reentrant.ErrNotReplicated)
	r.Resume()
	st, err := lc.Inspect(ctx, name)
	require.NoError(t, err)
	require.False(t, st.Held, "an unacknowledged acquisition is undone")
}

// failOver kills primary, promotes its paused or isolated replica, and
// returns a lock client on the new primary.
func failOver(t *testing.T, primary, replica *redisproc.Server, opts ...reentrant.ClientOption) *reentrant.Client {
	primary.Kill()
	replica.Resume()
	replica.Promote()
	return newClient(t, replica.Client(), opts...)
}

// A waiter's polls under WithReplicaAck run on a connection of their own,
// so that their WAIT follows their script. On a server without Functions,
// once the client has found it so, they go as EVALSHA at once: the
// connection is remembered as the client it came from, instead of each
// poll trying FCALL first.
func TestReplicaAckPollsRememberNoFunctions(t *testing.T) {
	noFunctions := redisproc.WithoutFunctions()
	primary := redisproc.Start(t, noFunctions)
	replica := redisproc.Start(t, noFunctions, redisproc.WithReplicaOf(primary))
	ctx := t.Context()
	replica.WaitSync(ctx)
	primary.WaitAcked(ctx, 1)
	rdb := primary.Client()
	calls := &scriptNames{}
	rdb.AddHook(calls)
	c := newClient(t, rdb, reentrant.WithReplicaAck(1, 3*time.Second))
	name := testenv.Unique(t)
	holder, err := c.Lock(ctx, name)
	require.NoError(t, err)
	require.Equal(t, int64(1), calls.fcall.Load(), "the first call finds the server without Functions")

	got := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, name, reentrant.WithRetry(reentrant.LinearBackoff(10*time.Millisecond)))
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	// Polls go on while the holder keeps the lock: wait for a few.
	const polls = 5
	start := calls.evalsha.Load()
	require.Eventually(t, func() bool { return calls.evalsha.Load()-start >= polls }, time.Minute, 5*time.Millisecond,
		"the waiter must poll")
	require.NoError(t, holder.Unlock(ctx))
	require.NoError(t, <-got)
	require.Equal(t, int64(1), calls.fcall.Load(), "a poll tried FCALL on a server known to lack Functions")
}

// scriptNames counts the script commands a client sends, by how: FCALL
// (attempts included, answered or not) and EVALSHA.
type scriptNames struct{ fcall, evalsha atomic.Int64 }

func (h *scriptNames) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptNames) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *scriptNames) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h *scriptNames) count(cmd redis.Cmder) {
	switch strings.ToLower(cmd.Name()) {
	case "fcall":
		h.fcall.Add(1)
	case "evalsha":
		h.evalsha.Add(1)
	}
}

// LockMulti with WithReplicaAck: the names are handed out only once a
// replica has every one of them; without the acknowledgement all are
// undone before the call returns.
func TestReplicaAckLockMulti(t *testing.T) {
	t.Parallel() // see TestMain
	primary, replica := primaryWithReplica(t)
	ctx := t.Context()
	c := newClient(t, primary.Client(), reentrant.WithReplicaAck(1, 2*time.Second))
	p := testenv.Unique(t)
	names := []string{p + "/a", p + "/b", p + "/c"}

	m, err := c.LockMulti(ctx, names)
	require.NoError(t, err)
	for _, n := range names {
		got, err := lockToken(ctx, replica.Client(), scripts.KeysFor(prefix, n).Lock)
		require.NoError(t, err)
		require.Equal(t, m.Token(n), fence.Token(got), "%s: an acknowledged token is on the replica", n)
	}
	require.NoError(t, m.Unlock(ctx))

	replica.Isolate()
	_, err = c.TryLockMulti(ctx, names)
	require.ErrorIs(t, err, reentrant.ErrNotReplicated)
	for _, n := range names {
		st, err := c.Inspect(ctx, n)
		require.NoError(t, err)
		require.False(t, st.Held, "%s: an unacknowledged take is undone", n)
	}
	replica.Resume()
}

// lockToken reads the token of the hold at key (its field t) from rdb (a
// replica).
func lockToken(ctx context.Context, rdb redis.Cmdable, key string) (uint64, error) {
	return rdb.HGet(ctx, key, "t").Uint64()
}
