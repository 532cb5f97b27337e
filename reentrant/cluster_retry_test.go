package reentrant_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/reentrant"
)

// clusterReply is an error reply of a Cluster in transition, as go-redis
// returns it: a redis.Error.
type clusterReply string

func (e clusterReply) Error() string { return string(e) }
func (clusterReply) RedisError()     {}

// busyHook answers the next n script calls (EVALSHA and EVAL, alone or in
// a pipeline) with err instead of sending them, as a Cluster moving a slot
// or electing a primary does: nothing runs.
type busyHook struct {
	err     error
	n, seen atomic.Int64
}

func (h *busyHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *busyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.refuse(cmd) {
			return h.err
		}
		return next(ctx, cmd)
	}
}

func (h *busyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var pass []redis.Cmder
		for _, cmd := range cmds {
			if !h.refuse(cmd) {
				pass = append(pass, cmd)
			}
		}
		if len(pass) == 0 {
			return h.err
		}
		return next(ctx, pass)
	}
}

func (h *busyHook) refuse(cmd redis.Cmder) bool {
	if name := cmd.Name(); name != "evalsha" && name != "eval" {
		return false
	}
	if h.n.Add(-1) < 0 {
		h.n.Add(1)
		return false
	}
	h.seen.Add(1)
	cmd.SetErr(h.err)
	return true
}

// Each Cluster reply that proves nothing ran is retried within the
// caller's context: the caller sees the call succeed, with the promises
// of a call that was never refused.
func TestBusyClusterRepliesAreRetried(t *testing.T) {
	for _, reply := range []string{
		"TRYAGAIN Multiple keys request during rehashing of slot",
		"ASK 3300 127.0.0.1:7001", "MOVED 3300 127.0.0.1:7001",
		"CLUSTERDOWN The cluster is down",
	} {
		t.Run(strings.Fields(reply)[0], func(t *testing.T) {
			_, rdb := testenv.Mini(t)
			h := &busyHook{err: clusterReply(reply)}
			rdb.AddHook(h)
			c := newClient(t, rdb, reentrant.WithTTL(time.Minute))
			ctx, name := t.Context(), testenv.Unique(t)

			h.n.Store(3)
			l, err := c.Lock(ctx, name)
			require.NoError(t, err, "Lock")
			require.EqualValues(t, 1, l.Token())
			h.n.Store(3)
			inner, err := c.TryLock(l.Context(), name)
			require.NoError(t, err, "TryLock (reentry)")
			require.EqualValues(t, 2, inner.Depth())
			h.n.Store(3)
			st, err := c.Inspect(ctx, name)
			require.NoError(t, err, "Inspect")
			require.EqualValues(t, 2, st.Depth)
			h.n.Store(3)
			require.NoError(t, l.Extend(ctx, time.Minute), "Extend")
			h.n.Store(3)
			_, err = l.TTL(ctx)
			require.NoError(t, err, "TTL")
			h.n.Store(3)
			require.NoError(t, inner.Unlock(ctx), "Unlock (inner)")
			h.n.Store(3)
			require.NoError(t, l.Unlock(ctx), "Unlock")
			require.EqualValues(t, 21, h.seen.Load(), "every refusal was seen and retried")

			st, err = c.Inspect(ctx, name)
			require.NoError(t, err)
			require.False(t, st.Held, "released once per level, not more, not less")
			require.EqualValues(t, 1, st.LastToken)
		})
	}
}

// While the Cluster stays busy past the caller's context, the call fails
// with the context's error and the last reply, which errors.As finds; an
// acquire's undo runs in the background and leaves nothing behind.
func TestBusyClusterPastTheContext(t *testing.T) {
	_, rdb := testenv.Mini(t)
	h := &busyHook{err: clusterReply("TRYAGAIN Multiple keys request during rehashing of slot")}
	rdb.AddHook(h)
	c := newClient(t, rdb, reentrant.WithTTL(time.Minute))
	name := testenv.Unique(t)

	h.n.Store(1 << 30)
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.TryLock(ctx, name)
	require.ErrorIs(t, err, reentrant.ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var reply redis.Error
	require.True(t, errors.As(err, &reply), "errors.As finds the reply: %v", err)
	testenv.Within(t, time.Since(start), 150*time.Millisecond+reentrant.CleanupBudget, "TryLock on a busy Cluster")
	require.Greater(t, h.seen.Load(), int64(5), "retried with backoff meanwhile")

	h.n.Store(0)
	st, err := c.Inspect(t.Context(), name)
	require.NoError(t, err)
	require.False(t, st.Held)
}

// Renewals a Cluster refuses for now are sent again within the renewal's
// window, so the lease survives.
func TestBusyClusterRenewalIsRetried(t *testing.T) {
	_, rdb := testenv.Mini(t)
	h := &busyHook{err: clusterReply("CLUSTERDOWN The cluster is down")}
	rdb.AddHook(h)
	c := newClient(t, rdb, reentrant.WithTTL(time.Minute))
	l, err := c.Lock(t.Context(), testenv.Unique(t))
	require.NoError(t, err)
	h.n.Store(4)
	require.Equal(t, 1, reentrant.RenewAllNow(c))
	require.EqualValues(t, 4, h.seen.Load())
	require.NoError(t, l.Err(), "the renewal went through on the fifth attempt")
	require.NoError(t, l.Unlock(t.Context()))
}
