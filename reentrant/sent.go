package reentrant

// Whether a failed call could have sent its command: a call that wrote
// nothing to Redis sent nothing, and its error must not say "outcome
// unknown".

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"weak"

	"github.com/redis/go-redis/v9"
)

// sendWatch tells, for the go-redis clients of one Client, whether any
// byte may have been written to Redis between two marks: a dial hook wraps
// every connection those clients make, and counts the writes that sent
// bytes; the pool's hit count covers the connections made before the hook
// was added (a *redis.Client used before New). When neither moved, no call
// of this Client in that span wrote to Redis, whatever its error says; when
// either moved (this call's write, or another call's at the same moment),
// the call may have sent its command. So the answer errs only on the side
// of "may have run". A client it cannot watch (a ClusterClient, whose node
// clients come and go, or another type) always answers "may have".
type sendWatch struct {
	nodes []watched
}

// watched is one go-redis client under watch.
type watched struct {
	rdb    *redis.Client
	writes *atomic.Uint64
}

// sendMark is what a sendWatch counted at one instant.
type sendMark struct {
	hits   uint64
	writes uint64
	ok     bool // every client is watched
}

// writeCounts holds each watched go-redis client's count of writes, so
// that many Clients built on one go-redis client add one hook between
// them. Its keys are weak: an entry does not keep its client alive.
var writeCounts sync.Map // weak.Pointer[redis.Client] -> *atomic.Uint64

// watchSends returns the watch of rdbs, adding a dial hook to each
// *redis.Client that has none yet.
func watchSends(rdbs ...redis.UniversalClient) *sendWatch {
	w := &sendWatch{}
	for _, rdb := range rdbs {
		c, ok := rdb.(*redis.Client)
		if !ok {
			return &sendWatch{}
		}
		n, loaded := writeCounts.LoadOrStore(weak.Make(c), new(atomic.Uint64))
		writes := n.(*atomic.Uint64)
		if !loaded {
			c.AddHook(writeCounter{writes})
		}
		w.nodes = append(w.nodes, watched{c, writes})
	}
	return w
}

// mark counts now.
func (w *sendWatch) mark() sendMark {
	if len(w.nodes) == 0 {
		return sendMark{}
	}
	m := sendMark{ok: true}
	for _, n := range w.nodes {
		m.writes += n.writes.Load()
		s := n.rdb.PoolStats()
		m.hits += uint64(s.Hits)
		if s.PipelineStats != nil {
			m.hits += uint64(s.PipelineStats.Hits)
		}
	}
	return m
}

// sentNothing reports that no connection was handed out since m, so
// nothing a call begun after m sent can have reached Redis.
func (w *sendWatch) sentNothing(m sendMark) bool {
	return m.ok && w.mark() == m
}

// writeCounter is a go-redis hook that wraps each new connection so that
// its writes are counted in n.
type writeCounter struct{ n *atomic.Uint64 }

func (h writeCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return conn, err
		}
		counted := countedConn{conn, h.n}
		if sc, ok := conn.(syscall.Conn); ok {
			// go-redis checks a pooled connection's health through its
			// file descriptor.
			return countedSysConn{counted, sc}, nil
		}
		return counted, nil
	}
}

func (writeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (writeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// countedConn is a connection whose writes that send bytes are counted.
type countedConn struct {
	net.Conn
	n *atomic.Uint64
}

func (c countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.n.Add(1)
	}
	return n, err
}

// countedSysConn is a countedConn of a connection with a file descriptor.
type countedSysConn struct {
	countedConn
	sc syscall.Conn
}

func (c countedSysConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }
