package netfault

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

const (
	dialTimeout = 5 * time.Second
	chunkSize   = 32 << 10
	// queueLen bounds the chunks held per direction and connection; a full
	// queue stops reading, so a held chunk back-pressures the sender as a
	// slow network would, instead of buffering without limit.
	queueLen = 64
)

// acceptLoop hands each accepted connection to serve until Close.
func (p *Proxy) acceptLoop() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			// Running out of descriptors must not kill the proxy for good.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
			continue
		}
		p.accepted.Add(1)
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			p.refused.Add(1)
			c.Close()
			continue
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// link is one proxied connection: the client's socket and the server's.
type link struct {
	client, server net.Conn
	done           chan struct{} // closed when the sockets are
	once           sync.Once
}

// close closes both sockets once; with reset, the kernel sends RST instead
// of FIN because unsent data is discarded (linger 0).
func (l *link) close(reset bool) {
	l.once.Do(func() {
		close(l.done)
		for _, c := range []net.Conn{l.client, l.server} {
			if tc, ok := c.(*net.TCPConn); ok && reset {
				tc.SetLinger(0)
			}
			c.Close()
		}
	})
}

// serve dials the target for one client and forwards both ways until both
// have ended. A failed dial closes the client, as a down server would.
func (p *Proxy) serve(client net.Conn) {
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	l := &link{client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed { // Close already took its snapshot of the links
		p.mu.Unlock()
		l.close(false)
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(l, Upstream, client, server) })
	p.pipe(l, Downstream, server, client)
	wg.Wait()
	l.close(false)
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst for one direction. A reader goroutine stamps each
// chunk with its due time when it arrives and queues it; pipe delivers the
// queue in order, each chunk once due. Latency so delays every chunk by d
// instead of adding d per chunk, and a held chunk holds those behind it.
func (p *Proxy) pipe(l *link, dir Direction, src, dst net.Conn) {
	q := make(chan chunk, queueLen)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		defer close(q)
		p.read(l, dir, src, q)
	})
	for c := range q {
		if wait := time.Until(c.due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.done:
				t.Stop()
				return
			}
		}
		if _, err := dst.Write(c.b); err != nil {
			l.close(false)
			return
		}
		p.bytes[dir].Add(int64(len(c.b)))
	}
	// src sent FIN and everything before it is delivered: pass the half-close
	// on, so a peer that reads to EOF still works through the proxy.
	if tc, ok := dst.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
}

// read queues src's chunks for pipe until EOF, which pipe passes on as a
// half-close, or an error, which ends the whole link.
func (p *Proxy) read(l *link, dir Direction, src net.Conn, q chan<- chunk) {
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if c, ok := p.stamp(dir, buf[:n]); ok {
				select {
				case q <- c:
				case <-l.done:
					return
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				l.close(false) // a reset or a closed socket ends both ways
			}
			return
		}
	}
}

// stamp applies dir's faults to a chunk just read. It reports false if the
// chunk is dropped; otherwise it returns a copy and the time it is due.
func (p *Proxy) stamp(dir Direction, b []byte) (chunk, bool) {
	now := time.Now()
	p.mu.Lock()
	f := &p.faults[dir]
	if f.blackhole {
		p.mu.Unlock()
		p.dropped[dir].Add(1)
		return chunk{}, false
	}
	delay := f.latency + f.next
	f.next = 0
	p.mu.Unlock()
	if delay > 0 {
		p.delayed[dir].Add(1)
	}
	return chunk{b: bytes.Clone(b), due: now.Add(delay)}, true
}
