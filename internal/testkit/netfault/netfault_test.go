package netfault_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/netfault"
)

// echoServer starts a TCP echo server that closes a connection when the
// client half-closes it. Cleanup closes it and waits for its goroutines.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				io.Copy(c, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newProxy(t *testing.T) *netfault.Proxy {
	t.Helper()
	p, err := netfault.New(echoServer(t))
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *netfault.Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends msg and reads len(msg) bytes back within timeout.
func roundTrip(c net.Conn, msg string, timeout time.Duration) (string, time.Duration, error) {
	start := time.Now()
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", 0, err
	}
	c.SetReadDeadline(start.Add(timeout))
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(c, buf)
	return string(buf), time.Since(start), err
}

func TestDataPassesUnchanged(t *testing.T) {
	p := newProxy(t)
	var wg sync.WaitGroup
	for range 4 {
		c := dial(t, p)
		want := make([]byte, 1<<20)
		rand.Read(want)
		wg.Go(func() {
			// Write concurrently: the echo blocks if nobody reads.
			var w sync.WaitGroup
			w.Go(func() {
				c.Write(want)
				c.(*net.TCPConn).CloseWrite()
			})
			got, err := io.ReadAll(c) // EOF proves the half-close made it through
			w.Wait()
			assert.NoError(t, err)
			assert.True(t, bytes.Equal(want, got), "echoed %d bytes differ from the %d sent", len(got), len(want))
		})
	}
	// Faults that delay but do not drop, changed while data flows.
	for range 5 {
		p.SetLatency(netfault.Upstream, time.Millisecond)
		p.DelayNext(netfault.Downstream, 2*time.Millisecond)
		time.Sleep(time.Millisecond)
		p.SetLatency(netfault.Upstream, 0)
	}
	wg.Wait()
	assert.Equal(t, int64(4), p.Stats().Accepted)
	// A chunk is counted once its write returned, which can be after the
	// peer read it.
	assert.Eventually(t, func() bool {
		s := p.Stats()
		return s.Bytes[netfault.Upstream] == 4<<20 && s.Bytes[netfault.Downstream] == 4<<20
	}, 30*time.Second, time.Millisecond, "bytes forwarded: %v, want 4 MiB each way", p.Stats().Bytes)
}

func TestLatency(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	const d = 50 * time.Millisecond
	p.SetLatency(netfault.Upstream, d)
	p.SetLatency(netfault.Downstream, d)
	for _, msg := range []string{"a", "b"} {
		got, took, err := roundTrip(c, msg, time.Second)
		require.NoError(t, err)
		assert.Equal(t, msg, got)
		assert.GreaterOrEqual(t, took, 2*d)
	}
	p.SetLatency(netfault.Upstream, 0)
	p.SetLatency(netfault.Downstream, 0)
	// Latency removed: the proxy delays nothing more (counted, not timed).
	_, _, err := roundTrip(c, "c", time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(2), p.Stats().Delayed[netfault.Upstream])
	assert.Equal(t, int64(2), p.Stats().Delayed[netfault.Downstream])
}

func TestDelayNextDelaysOneReplyOnly(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	_, _, err := roundTrip(c, "warm", time.Second)
	require.NoError(t, err)

	const d = 150 * time.Millisecond
	p.DelayNext(netfault.Downstream, d)
	start := time.Now()
	// A client with a shorter read timeout gives up on the held reply...
	_, _, err = roundTrip(c, "1", 50*time.Millisecond)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout())
	// ...which still arrives, late, and the next reply queues behind it.
	c.SetReadDeadline(time.Now().Add(time.Second))
	_, err = c.Write([]byte("2"))
	require.NoError(t, err)
	buf := make([]byte, 2)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	assert.Equal(t, "12", string(buf))
	assert.GreaterOrEqual(t, time.Since(start), d)

	// The one-shot is consumed: later replies are not delayed (counted,
	// not timed: a loaded machine may be slow for other reasons).
	for _, msg := range []string{"3", "4"} {
		got, _, err := roundTrip(c, msg, time.Second)
		require.NoError(t, err)
		assert.Equal(t, msg, got)
	}
	assert.Equal(t, int64(1), p.Stats().Delayed[netfault.Downstream])
}

func TestBlackhole(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	p.Blackhole(netfault.Upstream, true)
	_, _, err := roundTrip(c, "x", 100*time.Millisecond)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout())

	// The connection survived and "x" is gone for good.
	p.Blackhole(netfault.Upstream, false)
	got, _, err := roundTrip(c, "y", time.Second)
	require.NoError(t, err)
	assert.Equal(t, "y", got)
	s := p.Stats()
	assert.Equal(t, int64(1), s.Dropped[netfault.Upstream])
	// A chunk is counted once its write returned, which can be after the
	// echo came back.
	assert.Eventually(t, func() bool { return p.Stats().Bytes[netfault.Upstream] == 1 }, 30*time.Second, time.Millisecond,
		"bytes forwarded upstream: %d, want 1", p.Stats().Bytes[netfault.Upstream])
}

func TestResetAll(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	_, _, err := roundTrip(c, "a", time.Second)
	require.NoError(t, err)

	p.ResetAll()
	c.SetReadDeadline(time.Now().Add(time.Second))
	_, err = c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, syscall.ECONNRESET)

	// The proxy itself is fine: a new connection works.
	got, _, err := roundTrip(dial(t, p), "b", time.Second)
	require.NoError(t, err)
	assert.Equal(t, "b", got)
}

func TestRefuseNew(t *testing.T) {
	p := newProxy(t)
	live := dial(t, p)
	_, _, err := roundTrip(live, "a", time.Second)
	require.NoError(t, err)

	p.RefuseNew(true)
	c := dial(t, p)
	c.SetReadDeadline(time.Now().Add(time.Second))
	_, err = c.Read(make([]byte, 1))
	assert.True(t, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET), "got %v", err)

	// Live connections are untouched, and turning it off accepts again.
	_, _, err = roundTrip(live, "b", time.Second)
	require.NoError(t, err)
	p.RefuseNew(false)
	_, _, err = roundTrip(dial(t, p), "c", time.Second)
	require.NoError(t, err)
	s := p.Stats()
	assert.Equal(t, int64(3), s.Accepted)
	assert.Equal(t, int64(1), s.Refused)
}

func TestNewRefusesNonLoopback(t *testing.T) {
	for _, target := range []string{"10.0.0.1:6379", "example.com:6379", ":6379", "0.0.0.0:6379", "[::]:6379", "8.8.8.8:53", "127.0.0.1"} {
		_, err := netfault.New(target)
		assert.Error(t, err, target)
	}
	_, err := netfault.New("192.168.1.1:6379")
	assert.ErrorIs(t, err, netfault.ErrNotLoopback)
	_, err = netfault.New("127.0.0.1:6379", netfault.WithListenAddr("0.0.0.0:0"))
	assert.ErrorIs(t, err, netfault.ErrNotLoopback)

	for _, target := range []string{"127.0.0.1:6379", "127.1.2.3:6379", "[::1]:6379", "localhost:6379"} {
		p, err := netfault.New(target)
		if assert.NoError(t, err, target) {
			p.Close()
		}
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	addr := echoServer(t)
	before := runtime.NumGoroutine()

	p, err := netfault.New(addr)
	require.NoError(t, err)
	var conns []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", p.Addr())
		require.NoError(t, err)
		defer c.Close()
		conns = append(conns, c)
		_, _, err = roundTrip(c, "a", time.Second)
		require.NoError(t, err)
	}
	// Leave goroutines holding a chunk, queued behind it, and blocked reading.
	p.DelayNext(netfault.Downstream, time.Hour)
	conns[0].Write([]byte("held"))
	time.Sleep(5 * time.Millisecond)
	conns[0].Write([]byte("queued"))
	p.Blackhole(netfault.Upstream, true)
	conns[1].Write([]byte("dropped"))
	time.Sleep(20 * time.Millisecond)

	start := time.Now()
	require.NoError(t, p.Close())
	// The chunk is held for an hour: a Close that waited for it would take
	// that long, far past a loaded machine's slowest Close.
	assert.Less(t, time.Since(start), 30*time.Second, "Close waited for a held chunk")
	require.NoError(t, p.Close(), "second Close")

	// The clients see their connections closed.
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(make([]byte, 16))
		assert.Error(t, err)
	}
	// Echo handlers exit once they see EOF; give them time (a ceiling of
	// 30 s), then compare.
	var now int
	for range 3000 {
		if now = runtime.NumGoroutine(); now <= before {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	assert.LessOrEqual(t, now, before, "goroutines leaked")
}
