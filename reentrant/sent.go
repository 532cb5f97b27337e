package reentrant

// Whether a failed call could have sent its command: a call that never got
// a connection sent nothing, and its error must not say "outcome unknown".

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/redis/go-redis/v9"
)

// sendWatch tells, for the go-redis clients of one Client, whether any
// connection was handed out between two marks: a pooled connection (the
// pool's hit count) or a new one (a dial hook's count of dials that
// succeeded). When neither moved, no call of this Client in that span
// wrote a byte to Redis, whatever its error says; when either moved (this
// call's connection, or another call's at the same moment), the call may
// have sent its command. So the answer errs only on the side of "may have
// run". A client it cannot watch (a ClusterClient, whose node clients come
// and go, or another type) always answers "may have".
type sendWatch struct {
	nodes []watched
}

// watched is one go-redis client under watch.
type watched struct {
	rdb   *redis.Client
	dials *atomic.Uint64
}

// sendMark is what a sendWatch counted at one instant.
type sendMark struct {
	hits  uint64
	dials uint64
	ok    bool // every client is watched
}

// dialCounts holds each watched go-redis client's count of successful
// dials, so that many Clients built on one go-redis client add one hook
// between them. Its keys are weak: an entry does not keep its client
// alive.
var dialCounts sync.Map // weak.Pointer[redis.Client] -> *atomic.Uint64

// watchSends returns the watch of rdbs, adding a dial hook to each
// *redis.Client that has none yet.
func watchSends(rdbs ...redis.UniversalClient) *sendWatch {
	w := &sendWatch{}
	for _, rdb := range rdbs {
		c, ok := rdb.(*redis.Client)
		if !ok {
			return &sendWatch{}
		}
		n, loaded := dialCounts.LoadOrStore(weak.Make(c), new(atomic.Uint64))
		dials := n.(*atomic.Uint64)
		if !loaded {
			c.AddHook(dialCounter{dials})
		}
		w.nodes = append(w.nodes, watched{c, dials})
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
		m.dials += n.dials.Load()
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

// dialCounter is a go-redis hook that counts the dials that succeed.
type dialCounter struct{ n *atomic.Uint64 }

func (h dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err == nil {
			h.n.Add(1)
		}
		return conn, err
	}
}

func (dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
