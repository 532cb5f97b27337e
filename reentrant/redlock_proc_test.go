//go:build unix

package reentrant_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/redisproc"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

// redlockProcs starts n redis-servers and returns them with a client of
// each with short, context-honouring timeouts.
func redlockProcs(t *testing.T, n int) ([]*redisproc.Server, []redis.UniversalClient) {
	t.Helper()
	var srvs []*redisproc.Server
	var nodes []redis.UniversalClient
	for range n {
		s := redisproc.Start(t)
		srvs = append(srvs, s)
		nodes = append(nodes, s.Client(func(o *redis.Options) {
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
			o.MaxRetries, o.ContextTimeoutEnabled = -1, true
		}))
	}
	return srvs, nodes
}

// SIGSTOP one of 3 and two of 5: still acquired, renewed and released
// through the majority; a majority stopped: Lock fails with ErrNotAcquired
// when its context ends.
func TestRedlockPausedNodes(t *testing.T) {
	for _, n := range []int{3, 5} {
		srvs, nodes := redlockProcs(t, n)
		c := newRedlock(t, nodes, reentrant.WithTTL(600*time.Millisecond))
		name := testenv.Unique(t)
		first, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		require.NoError(t, first.Unlock(t.Context()))

		for _, s := range srvs[:n/2] {
			s.Pause()
		}
		l, err := c.Lock(t.Context(), name)
		require.NoError(t, err, "%d of %d stopped", n/2, n)
		require.Greater(t, l.Token(), first.Token())
		in, err := c.Lock(l.Context(), name)
		require.NoError(t, err)
		require.Equal(t, l.Token(), in.Token(), "reentry keeps the token")
		time.Sleep(800 * time.Millisecond) // past the TTL: renewed through the majority
		require.NoError(t, l.Err())
		require.NoError(t, in.Unlock(t.Context()))
		require.NoError(t, l.Unlock(t.Context()))

		srvs[n/2].Pause() // now a majority is stopped
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		start := time.Now()
		_, err = c.Lock(ctx, name)
		cancel()
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
		require.Less(t, time.Since(start), 1500*time.Millisecond, "Lock must end soon after its context")
		for _, s := range srvs[:n/2+1] {
			s.Resume()
		}
		l, err = c.Lock(t.Context(), name)
		require.NoError(t, err)
		require.Greater(t, l.Token(), first.Token())
		require.NoError(t, l.Unlock(t.Context()))
	}
}

// A node SIGKILLed and restarted without AOF (its counter gone) mid-run
// does not make tokens repeat while the others remember.
func TestRedlockRestartWithoutAOF(t *testing.T) {
	srvs, nodes := redlockProcs(t, 3)
	a, b := newRedlock(t, nodes), newRedlock(t, nodes)
	name := testenv.Unique(t)
	k := lua.KeysFor(prefix, name)
	seen := map[uint64]bool{}
	var last uint64
	for i := range 12 {
		if i == 4 || i == 8 {
			// The premise: the other nodes remember the last token (see
			// TestRedlockForgetfulNode). A node outside the bare majority
			// learns it in the background, later on a loaded machine.
			gone := i/4 - 1
			for j, rdb := range nodes {
				if j != gone {
					want := strconv.FormatUint(last, 10)
					require.Eventually(t, func() bool { return rdb.HGet(t.Context(), k.Lock, "t").Val() == want },
						5*time.Second, 10*time.Millisecond, "node %d never learned token %s", j, want)
				}
			}
			srvs[gone].Kill()
			srvs[gone].Restart()
		}
		l, err := []*reentrant.Client{a, b}[i%2].Lock(t.Context(), name)
		require.NoError(t, err)
		tok := uint64(l.Token())
		require.False(t, seen[tok], "token %d repeated", tok)
		require.Greater(t, tok, last)
		seen[tok], last = true, tok
		require.NoError(t, l.Unlock(t.Context()))
	}
}
