//go:build unix

package redisproc_test

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/redisproc"
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
