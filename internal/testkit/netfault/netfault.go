// Package netfault is an in-process TCP proxy that injects network faults
// between a client and a server on the loopback interface, for tests.
//
// A [Proxy] forwards every connection it accepts to one target address.
// Faults are set per [Direction] and may be changed at any time, from any
// goroutine, while connections are live. A fault applies to the chunks read
// after the call that set it; a chunk is whatever one Read returned, so
// chunks follow the peer's writes only approximately. A test that needs one
// chunk per message waits for each reply before it sends the next message,
// which is what a Redis client without pipelining does anyway.
//
// Both the listen and the target address must be loopback: the package is a
// test tool and refuses to carry traffic anywhere else.
package netfault

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNotLoopback is returned by [New] for a listen or target address whose
// host is not a loopback IP (127.0.0.0/8, ::1) or "localhost".
var ErrNotLoopback = errors.New("netfault: address is not loopback")

// Direction names one way of a proxied connection.
type Direction int

const (
	// Upstream is client to server: commands.
	Upstream Direction = iota
	// Downstream is server to client: replies.
	Downstream
)

// String returns "upstream" or "downstream".
func (d Direction) String() string {
	switch d {
	case Upstream:
		return "upstream"
	case Downstream:
		return "downstream"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

// Stats counts what a [Proxy] has done since [New]. Arrays are indexed by
// [Direction].
type Stats struct {
	Accepted int64    // connections accepted, refused ones included
	Refused  int64    // connections closed on accept because of RefuseNew
	Bytes    [2]int64 // bytes delivered to the peer
	Delayed  [2]int64 // chunks held by latency or DelayNext
	Dropped  [2]int64 // chunks discarded by Blackhole
}

// Option configures [New].
type Option func(*config)

type config struct{ listen string }

// WithListenAddr sets the address the proxy listens on; it must be loopback.
// The default is "127.0.0.1:0", a free port. A fixed port lets a test stop
// a proxy and start another one where clients expect the server.
func WithListenAddr(addr string) Option { return func(c *config) { c.listen = addr } }

type faults struct {
	latency   time.Duration
	next      time.Duration // one-shot extra delay; 0 when none is armed
	blackhole bool
}

// Proxy forwards TCP connections to a target and injects faults into them.
// All methods are safe for concurrent use. A Proxy must not be copied.
type Proxy struct {
	ln     net.Listener
	target string
	ctx    context.Context // cancelled by Close: aborts dials in flight
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the proxy started

	closeOnce sync.Once
	closeErr  error

	mu     sync.Mutex
	faults [2]faults
	refuse bool
	closed bool
	links  map[*link]struct{}

	accepted, refused       atomic.Int64
	bytes, delayed, dropped [2]atomic.Int64
}

// New starts a proxy that forwards each accepted connection to target,
// dialling it once per connection. It returns an error wrapping
// [ErrNotLoopback] if target or the listen address is not loopback, and the
// listener's error if it cannot listen. The target need not be up yet: a
// connection whose dial fails is closed. Call [Proxy.Close] when done.
func New(target string, opts ...Option) (*Proxy, error) {
	cfg := config{listen: "127.0.0.1:0"}
	for _, o := range opts {
		o(&cfg)
	}
	for _, addr := range []string{cfg.listen, target} {
		if err := checkLoopback(addr); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return nil, fmt.Errorf("netfault: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, target: target, ctx: ctx, cancel: cancel, links: map[*link]struct{}{}}
	p.wg.Go(p.acceptLoop)
	return p, nil
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("netfault: address %q: %w", addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	// An empty host means every interface, so it is refused like any other.
	if ip, err := netip.ParseAddr(host); err == nil && ip.Unmap().IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: %q", ErrNotLoopback, addr)
}

// Addr returns the address clients dial, as host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk read in dir from now on by d, keeping order
// per connection; chunks already read keep their delay. Zero or negative d
// removes the latency. dir must be Upstream or Downstream, or it panics.
func (p *Proxy) SetLatency(dir Direction, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults[dir].latency = max(d, 0)
}

// DelayNext arms a one-shot delay: the next chunk read in dir, on whichever
// connection reads first, is held for d on top of any latency, and the rest
// of that connection's traffic in dir queues behind it to keep order. The
// chunk consumes the delay; chunks dropped by Blackhole do not. A later call
// before that chunk replaces d; zero or negative d disarms it. Delaying a
// reply past a client's read timeout makes the client give up on a command
// the server has already executed. dir must be Upstream or Downstream.
func (p *Proxy) DelayNext(dir Direction, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults[dir].next = max(d, 0)
}

// Blackhole, while on, silently discards every chunk read in dir. Both
// connections stay open, so the peer learns nothing until its own timeout.
// Turning it off resumes delivery of chunks read afterwards; dropped ones are
// gone. dir must be Upstream or Downstream, or it panics.
func (p *Proxy) Blackhole(dir Direction, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults[dir].blackhole = on
}

// RefuseNew, while on, closes each new connection as soon as it is accepted,
// without dialling the target: clients see their first read return EOF, as
// from a server that is going down. Live connections are not affected.
func (p *Proxy) RefuseNew(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = on
}

// ResetAll aborts every live connection on both sides with a TCP RST, so the
// client and the server see "connection reset" rather than EOF; held chunks
// are lost. It returns once the sockets are closed; new connections are
// accepted as usual.
func (p *Proxy) ResetAll() {
	for _, l := range p.live() {
		l.close(true)
	}
}

// Stats returns the counters. Each counter is read atomically, but not all
// of them at one instant.
func (p *Proxy) Stats() Stats {
	s := Stats{Accepted: p.accepted.Load(), Refused: p.refused.Load()}
	for d := range 2 {
		s.Bytes[d] = p.bytes[d].Load()
		s.Delayed[d] = p.delayed[d].Load()
		s.Dropped[d] = p.dropped[d].Load()
	}
	return s
}

// Close stops listening, closes every connection on both sides, and returns
// after every goroutine the proxy started has exited. It returns the
// listener's close error. Later and concurrent calls wait for the first one
// and return the same error.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.cancel()
		p.closeErr = p.ln.Close()
		for _, l := range p.live() {
			l.close(false)
		}
		p.wg.Wait()
	})
	return p.closeErr
}

func (p *Proxy) live() []*link {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Collect(maps.Keys(p.links))
}
