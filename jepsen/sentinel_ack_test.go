//go:build unix

package jepsen_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// WithReplicaAck stays one round trip through a FailoverClient: the Lock
// that acquires a free name writes the acquire script and WAIT together and
// reads both replies (one go-redis pipeline, seen by a hook), and the
// primary receives both from one connection, in a row (seen by MONITOR).
// The controls send WAIT apart: after the script's reply, which the hook
// sees as two round trips, and on another connection, which MONITOR shows.
func TestSentinelReplicaAckOneRoundTrip(t *testing.T) {
	g := redisproc.StartSentinels(t, 1, 1)
	rdb := g.Client()
	trips := &sentinelTrips{}
	rdb.AddHook(trips.hook())
	ctx := t.Context()
	sentinelAckLocks(t, g, rdb, trips, "fcall")

	acquire := func(t *testing.T, rdb redis.Scripter) {
		keys := scripts.KeysFor("redfence", testenv.Unique(t))
		_, err := scripts.Acquire(ctx, rdb, keys, &scripts.Request{Owner: "o", Level: "l", TTL: time.Second, MaxDepth: 1})
		require.NoError(t, err)
	}
	t.Run("WAIT after the reply is caught", func(t *testing.T) {
		conn := rdb.Conn()
		defer conn.Close()
		trips.reset()
		acquire(t, conn)
		require.NoError(t, conn.Do(ctx, "WAIT", 1, 1000).Err())
		assert.Equal(t, []string{"fcall", "wait"}, trips.take(), "two round trips (the script as a Function)")
	})
	t.Run("WAIT on another connection is caught", func(t *testing.T) {
		mon := sentinelMonitor(t, g.Primary().Addr())
		other := rdb.Conn()
		defer other.Close()
		// A Conn takes its connection at its first command, and holds it.
		require.NoError(t, other.Ping(ctx).Err())
		acquire(t, rdb)
		require.NoError(t, other.Do(ctx, "WAIT", 1, 1000).Err())
		assert.ErrorContains(t, mon.sameConn(t, "fcall", "wait"), "came from")
	})
}

// sentinelAckLocks checks, for every token mode, that a Lock under
// WithReplicaAck through rdb, a client of g whose round trips trips
// counts, is one round trip that carries the script (as script, "fcall"
// or "evalsha") and WAIT, both on one connection to the primary. Each mode
// has a prefix of its own: the scripts refuse a name whose keys show the
// other mode (a strict counter, or a floor of the name's slot).
func sentinelAckLocks(t *testing.T, g *redisproc.Sentinels, rdb *redis.Client, trips *sentinelTrips, script string) {
	ctx := t.Context()
	for _, mode := range faultTokenModes {
		t.Run(mode.name, func(t *testing.T) {
			lc, err := reentrant.New(rdb, append([]reentrant.ClientOption{reentrant.WithReplicaAck(1, 2*time.Second),
				reentrant.WithPrefix("redfence-" + mode.name)}, mode.opts...)...)
			require.NoError(t, err)
			t.Cleanup(func() { _ = lc.Close() })
			// The first call loads the script and reads the eviction policy.
			l, err := lc.Lock(ctx, testenv.Unique(t))
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))

			mon := sentinelMonitor(t, g.Primary().Addr())
			trips.reset()
			l, err = lc.Lock(ctx, testenv.Unique(t))
			require.NoError(t, err)
			got := trips.take()
			require.NoError(t, l.Unlock(ctx))
			assert.Equal(t, []string{script + " wait"}, got, "round trips of one Lock: the script, WAIT in its pipeline")
			assert.NoError(t, mon.sameConn(t, script, "wait"))
		})
	}
}

// The same on a group without Functions (FUNCTION, FCALL and FCALL_RO
// renamed away on the primary and its replica): once the client has found
// it so, each Lock is one EVALSHA with its WAIT.
func TestSentinelReplicaAckWithoutFunctions(t *testing.T) {
	g := redisproc.StartSentinels(t, 1, 1, redisproc.WithoutFunctions())
	rdb := g.Client()
	trips := &sentinelTrips{}
	rdb.AddHook(trips.hook())
	sentinelAckLocks(t, g, rdb, trips, "evalsha")
}

// WithReplicaAck takes a FailoverClient, which is a *redis.Client, under
// the same ReadTimeout rule as any: the WAIT must end before the read does.
func TestSentinelReplicaAckClient(t *testing.T) {
	failover := func(readTimeout time.Duration) *redis.Client {
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}, ReadTimeout: readTimeout})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	def := failover(0).Options().ReadTimeout // go-redis's default
	require.Positive(t, def)
	for _, tc := range []struct {
		readTimeout, ack time.Duration
		ok               bool
	}{
		{0, def - time.Millisecond, true},
		{0, def, false},
		{time.Second, 999 * time.Millisecond, true},
		{time.Second, time.Second, false},
		{-1, time.Hour, true}, // no read timeout
	} {
		c, err := reentrant.New(failover(tc.readTimeout), reentrant.WithReplicaAck(1, tc.ack))
		if !tc.ok {
			require.ErrorIs(t, err, reentrant.ErrInvalid, "ReadTimeout %v, ack %v", tc.readTimeout, tc.ack)
			continue
		}
		require.NoError(t, err, "ReadTimeout %v, ack %v", tc.readTimeout, tc.ack)
		require.NoError(t, c.Close())
	}
}

// sentinelTrips records each round trip a client sends (through hook): a
// command, or a pipeline as its commands' names joined by spaces.
type sentinelTrips struct {
	mu    sync.Mutex
	trips []string
}

func (h *sentinelTrips) hook() testenv.Hook {
	return testenv.Hook{Sent: func(cmds []redis.Cmder, _ bool) {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name()
		}
		h.add(strings.Join(names, " "))
	}}
}

func (h *sentinelTrips) add(s string) {
	h.mu.Lock()
	h.trips = append(h.trips, strings.ToLower(s))
	h.mu.Unlock()
}

func (h *sentinelTrips) reset() { h.take() }

func (h *sentinelTrips) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.trips
	h.trips = nil
	return t
}

// sentinelMon reads a MONITOR stream of a server.
type sentinelMon struct {
	conn net.Conn
	r    *bufio.Reader
}

func sentinelMonitor(t *testing.T, addr string) *sentinelMon {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	m := &sentinelMon{conn: conn, r: bufio.NewReader(conn)}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = conn.Write([]byte("MONITOR\r\n"))
	require.NoError(t, err)
	line, err := m.r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "+OK\r\n", line)
	return m
}

// sameConn reads the stream until it has seen first and then second, and
// says whether they came from one client connection with no command of that
// connection between them (commands run by scripts do not count).
func (m *sentinelMon) sameConn(t *testing.T, first, second string) error {
	t.Helper()
	var from string
	for {
		line, err := m.r.ReadString('\n')
		require.NoError(t, err, "MONITOR ended before %q came", second)
		// +1700000000.000000 [0 127.0.0.1:50000] "evalsha" ...
		_, rest, _ := strings.Cut(line, "[")
		client, cmd, _ := strings.Cut(rest, "] ")
		_, client, _ = strings.Cut(client, " ")
		name, _, _ := strings.Cut(strings.ToLower(cmd), " ")
		name = strings.Trim(name, "\"\r\n")
		switch {
		case client == "lua":
		case from == "" && name == first:
			from = client
		case from != "" && client == from && name != second:
			return fmt.Errorf("%s sent %s between %s and %s", client, name, first, second)
		case from != "" && name == second:
			if client != from {
				return fmt.Errorf("%s came from %s, %s from %s", first, from, second, client)
			}
			return nil
		}
	}
}
