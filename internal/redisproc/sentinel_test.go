//go:build unix

package redisproc_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/redisproc"
	"github.com/redfence/redfence/internal/testenv"
)

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
		require.Eventually(t, func() bool { return c.Get(ctx, "k").Val() == "v" }, 10*time.Second, 20*time.Millisecond,
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
