//go:build unix

package redisproc_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

func TestStartPingStop(t *testing.T) {
	t.Parallel()
	s := redisproc.Start(t)
	c := s.Client()
	require.NoError(t, c.Ping(t.Context()).Err())

	bind, err := c.ConfigGet(t.Context(), "bind").Result()
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", bind["bind"], "must listen on loopback only")
	host, _, err := net.SplitHostPort(s.Addr())
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", host)

	pid := s.PID()
	s.Stop()
	assert.False(t, alive(pid), "pid %d still running after Stop", pid)
	_, err = net.DialTimeout("tcp", s.Addr(), time.Second)
	assert.Error(t, err, "nothing may listen after Stop")
}

func TestPauseTimesOutResumeAnswers(t *testing.T) {
	t.Parallel()
	s := redisproc.Start(t)
	c := s.Client(func(o *redis.Options) {
		o.ReadTimeout = 200 * time.Millisecond
		o.MaxRetries = -1
	})
	require.NoError(t, c.Ping(t.Context()).Err())

	s.Pause()
	err := c.Ping(t.Context()).Err()
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "PING to a paused server: want a timeout, got %v", err)

	s.Resume()
	require.NoError(t, c.Ping(t.Context()).Err())
}

func TestKillRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []redisproc.Option
		want bool // whether the key survives
	}{
		{"aof always keeps the key", []redisproc.Option{redisproc.WithAOF("always")}, true},
		{"no aof loses the key", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := redisproc.Start(t, tc.opts...)
			c := s.Client()
			require.NoError(t, c.Set(t.Context(), "k", "v", 0).Err())

			addr, pid := s.Addr(), s.PID()
			s.Kill()
			assert.False(t, alive(pid), "pid %d still running after Kill", pid)
			s.Restart()
			assert.Equal(t, addr, s.Addr())
			assert.NotEqual(t, pid, s.PID())

			n, err := c.Exists(t.Context(), "k").Result()
			require.NoError(t, err)
			assert.Equal(t, tc.want, n == 1, "key present after restart")
		})
	}
}

func TestStopRestartKeepsAOF(t *testing.T) {
	t.Parallel()
	s := redisproc.Start(t, redisproc.WithAOF("everysec"))
	c := s.Client()
	require.NoError(t, c.Set(t.Context(), "k", "v", 0).Err())
	s.Pause()
	s.Stop() // must also stop a paused server
	s.Restart()
	v, err := c.Get(t.Context(), "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", v)
}

func TestIndependentMasters(t *testing.T) {
	t.Parallel()
	servers := []*redisproc.Server{redisproc.Start(t), redisproc.Start(t), redisproc.Start(t)}
	seen := map[string]bool{}
	for i, s := range servers {
		require.False(t, seen[s.Addr()], "two servers on %s", s.Addr())
		seen[s.Addr()] = true
		require.NoError(t, s.Client().Set(t.Context(), "k", i, 0).Err())
	}
	for i, s := range servers {
		n, err := s.Client().Get(t.Context(), "k").Int()
		require.NoError(t, err)
		assert.Equal(t, i, n, "server %d", i)
	}
	servers[0].Kill()
	assert.NoError(t, servers[1].Client().Ping(t.Context()).Err(), "killing one master must not touch another")
}

func TestLogTail(t *testing.T) {
	t.Parallel()
	s := redisproc.Start(t)
	tail := s.LogTail(5)
	assert.Contains(t, tail, "Ready to accept connections")
	assert.LessOrEqual(t, len(splitLines(tail)), 5)
}

func TestWithArgs(t *testing.T) {
	t.Parallel()
	s := redisproc.Start(t, redisproc.WithArgs("--maxmemory", "10mb"))
	v, err := s.Client().ConfigGet(t.Context(), "maxmemory").Result()
	require.NoError(t, err)
	assert.Equal(t, "10485760", v["maxmemory"])
}

// Sentinel promotes a replica when the primary is killed, a failover client
// follows it, the killed server rejoins as a replica, and every process is
// gone once the test's cleanups have run.
func TestSentinelFailover(t *testing.T) {
	var pids []int
	t.Run("scenario", func(t *testing.T) {
		start := time.Now()
		g := redisproc.StartSentinels(t, 2, 3)
		t.Logf("ready in %v", time.Since(start))
		c := g.Client(func(o *redis.FailoverOptions) { o.MaxRetries = -1 })
		ctx := t.Context()
		first := g.Primary()
		require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
		// Both replicas have k before the primary dies.
		require.EqualValues(t, 2, c.Do(ctx, "WAIT", 2, 5000).Val())

		start = time.Now()
		next := g.KillPrimary()
		t.Logf("failover took %v", time.Since(start))
		require.NotSame(t, first, next)
		assert.Same(t, next, g.Primary())
		require.Eventually(t, func() bool { return c.Get(ctx, "k").Val() == "v" }, time.Minute, 20*time.Millisecond,
			"the failover client reads k from the new primary")
		require.NoError(t, c.Set(ctx, "k", "w", 0).Err())

		g.WaitReplicas(ctx)
		g.Rejoin(first)
		v, err := first.Client().Get(ctx, "k").Result()
		require.NoError(t, err)
		assert.Equal(t, "w", v, "the old primary rejoined as a replica of the new one")

		for _, s := range g.Servers() {
			pids = append(pids, s.PIDs()...)
		}
		pids = append(pids, g.SentinelPIDs()...)
	})
	require.Len(t, pids, 7, "3 servers, one restarted, and 3 sentinels")
	for _, pid := range pids {
		assert.False(t, alive(pid), "pid %d left running", pid)
	}
}

// A redis-server that will not run as a sentinel is a missing binary:
// StartSentinels skips, or fails under CI=true. The stand-in runs a plain
// server where a sentinel was asked for.
func TestSentinelModeMissing(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Missing(t, redisproc.BinaryVar, "no redis-server on PATH: CI must run this test",
			"skipping: no redis-server on PATH to wrap")
	}
	fake := filepath.Join(t.TempDir(), "redis-server")
	script := fmt.Sprintf(`#!/bin/sh
if [ "$2" = "--sentinel" ]; then
	exec %[1]s --port "$(awk '$1 == "port" { print $2 }' "$1")" --bind 127.0.0.1 --save "" --dir "$(dirname "$1")"
fi
exec %[1]s "$@"
`, bin)
	require.NoError(t, os.WriteFile(fake, []byte(script), 0o755))
	t.Setenv(redisproc.BinaryVar, fake)
	for ci, want := range map[string]string{"": "skip", "true": "fatal"} {
		t.Setenv("CI", ci)
		tb := &recordTB{TB: t}
		tb.run(func() { redisproc.StartSentinels(tb, 1, 1) })
		assert.Equal(t, want, tb.ended, "CI=%q", ci)
		assert.Contains(t, tb.msg, "no Sentinel mode")
	}
}

// A cluster of three primaries with a replica each: every slot served,
// a slot moved with its keys, a graceful failover and a SIGKILL failover,
// and every process gone once the test ends.
func TestClusterMigrateAndFailover(t *testing.T) {
	var pids []int
	t.Run("scenario", func(t *testing.T) {
		c := redisproc.StartCluster(t, redisproc.ClusterConfig{Replicas: 1, NodeTimeout: time.Second})
		for _, s := range c.Nodes() {
			pids = append(pids, s.PID())
		}
		ctx := t.Context()
		masters := c.Masters()
		require.Len(t, masters, 3)
		for _, m := range masters {
			require.Len(t, c.ReplicasOf(m), 1, "replicas of %s", m.Addr())
			c.ReplicasOf(m)[0].WaitSync(ctx) // a cluster replica knows its primary
		}
		cc := c.Client()

		// Slot moves carry their keys; batches of one split them.
		const tag = "{redisproc}"
		slot := testenv.Slot(tag)
		src := c.MasterOf(slot)
		for i := range 5 {
			require.NoError(t, cc.Set(ctx, fmt.Sprintf("%s:%d", tag, i), i, 0).Err())
		}
		dst := masters[0]
		if dst == src {
			dst = masters[1]
		}
		st := c.MigrateSlot(slot, dst, 1, 0)
		assert.Equal(t, 5, st.Keys)
		assert.Equal(t, 5, st.Batches)
		assert.Equal(t, dst, c.MasterOf(slot))
		n, err := src.Client().DBSize(ctx).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "the source keeps no key of the moved slot")
		for i := range 5 {
			v, err := cc.Get(ctx, fmt.Sprintf("%s:%d", tag, i)).Int()
			require.NoError(t, err)
			assert.Equal(t, i, v)
		}

		// Graceful failover: the replica takes over, the old primary follows.
		r := c.ReplicasOf(dst)[0]
		took := c.Failover(r)
		t.Logf("CLUSTER FAILOVER took %v", took)
		assert.Equal(t, r, c.MasterOf(slot))
		assert.Equal(t, []*redisproc.Server{dst}, c.ReplicasOf(r))

		// SIGKILL: the old primary, now a replica again, is elected.
		require.NoError(t, cc.Do(ctx, "WAIT", 1, 2000).Err())
		promoted, took := c.KillMaster(r)
		t.Logf("SIGKILL failover took %v", took)
		assert.Equal(t, dst, promoted)
		assert.Equal(t, dst, c.MasterOf(slot))
		require.Eventually(t, func() bool {
			// go-redis goes on dialing the dead primary until it reloads
			// the slots, which nothing else makes it do here.
			cc.ReloadState(ctx)
			v, err := cc.Get(ctx, tag+":4").Int()
			return err == nil && v == 4
		}, time.Minute, 20*time.Millisecond, "the key survives the failover")
		require.Len(t, c.Masters(), 3)
	})
	for _, pid := range pids {
		assert.False(t, alive(pid), "redis-server pid %d left running", pid)
	}
}
