//go:build unix

package redisproc

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// syncTimeout bounds [Server.WaitSync] even when its context has no deadline.
const syncTimeout = 10 * time.Second

// ReplicaOf makes the server a replica of primary (REPLICAOF) and returns
// without waiting for the sync; call [Server.WaitSync]. The server drops its
// own data for the primary's. A later [Server.Restart] keeps the role.
func (s *Server) ReplicaOf(primary *Server) {
	s.t.Helper()
	s.do("REPLICAOF", "127.0.0.1", strconv.Itoa(primary.port))
	s.mu.Lock()
	s.primary = primary
	s.mu.Unlock()
}

// Promote makes a replica a master (REPLICAOF NO ONE). It keeps the data it
// has, which is all a failover can give: writes its primary acknowledged but
// never sent are lost. A later [Server.Restart] keeps the role.
func (s *Server) Promote() {
	s.t.Helper()
	s.do("REPLICAOF", "NO", "ONE")
	s.mu.Lock()
	s.primary = nil
	s.mu.Unlock()
}

// WaitSync waits until the replica's link to its primary is up and it has
// applied every write the primary had taken when WaitSync was called. It
// fails the test if the server is not a replica, or if that takes longer than
// ctx allows or 10 seconds, whichever is shorter.
func (s *Server) WaitSync(ctx context.Context) {
	s.t.Helper()
	primary := s.currentPrimary()
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	var why string
	for {
		why = s.syncGap(ctx, primary)
		if why == "" {
			return
		}
		select {
		case <-ctx.Done():
			s.t.Fatalf("redisproc: replica %s of %s not in sync: %s (%v)\n%s", s.Addr(), primary.Addr(), why, ctx.Err(), s.LogTail(20))
		case <-time.After(pollEvery):
		}
	}
}

// syncGap says why the replica is not yet in sync with primary, or "" if it
// is. The primary is read first: its offset only grows, so a replica that has
// reached it has every write the primary had before this call.
func (s *Server) syncGap(ctx context.Context, primary *Server) string {
	p, err := primary.info(ctx)
	if err != nil {
		return "primary: " + err.Error()
	}
	r, err := s.info(ctx)
	if err != nil {
		return "replica: " + err.Error()
	}
	switch {
	case r["role"] != "slave" || r["master_port"] != strconv.Itoa(primary.port):
		return fmt.Sprintf("role %s of port %s", r["role"], r["master_port"])
	case r["master_link_status"] != "up":
		return "master_link_status:" + r["master_link_status"]
	case r["master_replid"] != p["master_replid"]:
		return "replication ids differ: " + r["master_replid"] + " vs " + p["master_replid"]
	}
	ro, _ := strconv.ParseInt(r["slave_repl_offset"], 10, 64)
	po, _ := strconv.ParseInt(p["master_repl_offset"], 10, 64)
	if ro < po {
		return fmt.Sprintf("offset %d behind %d", ro, po)
	}
	return ""
}

// Isolate freezes a replica (SIGSTOP) and closes its link on its primary, so
// the primary goes on accepting writes this replica never receives. SIGSTOP
// alone would not do: what the primary sends meanwhile waits in the frozen
// replica's socket buffer, and the replica applies it after SIGCONT unless a
// REPLICAOF NO ONE happens to be served first.
//
// [Server.Resume] ends the isolation. The replica then finds its link closed
// and reconnects within about a second; if the primary is still up it
// resyncs and gets the writes after all. To lose them, kill the primary
// before Resume and [Server.Promote] the replica after. Call [Server.WaitSync]
// first: Isolate fails the test if the replica's link is not up.
func (s *Server) Isolate() {
	s.t.Helper()
	primary := s.currentPrimary()
	// The link's local address on the replica is its client address on
	// the primary; read it while the replica can still answer.
	list, ok := s.do("CLIENT", "LIST", "TYPE", "master").(string)
	laddr := field(list, "laddr")
	if !ok || laddr == "" {
		s.t.Fatalf("redisproc: isolate %s: no link to %s; call WaitSync first (CLIENT LIST: %q)", s.Addr(), primary.Addr(), list)
	}
	s.Pause()
	primary.do("CLIENT", "KILL", "ADDR", laddr)
}

// currentPrimary returns the server's primary or fails the test.
func (s *Server) currentPrimary() *Server {
	s.t.Helper()
	s.mu.Lock()
	p := s.primary
	s.mu.Unlock()
	if p == nil {
		s.t.Fatalf("redisproc: %s is not a replica", s.Addr())
	}
	return p
}

// do runs an admin command, bounded, and fails the test on error.
func (s *Server) do(args ...any) any {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := s.adminClient().Do(ctx, args...).Result()
	if err != nil {
		s.t.Fatalf("redisproc: %s: %v: %v", s.Addr(), args, err)
	}
	return v
}

// info returns the server's INFO replication fields.
func (s *Server) info(ctx context.Context) (map[string]string, error) {
	return s.infoSection(ctx, "replication")
}

// infoSection returns the fields of one INFO section, within 2 seconds.
func (s *Server) infoSection(ctx context.Context, section string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	v, err := s.adminClient().Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	return parseInfo(v), nil
}

// Info returns the fields of the INFO section named (such as "memory" or
// "commandstats"), field name to value, through the package's own client.
// It fails the test if the server does not answer within 2 seconds.
func (s *Server) Info(section string) map[string]string {
	s.t.Helper()
	m, err := s.infoSection(context.Background(), section)
	if err != nil {
		s.t.Fatalf("redisproc: %s: INFO %s: %v", s.Addr(), section, err)
	}
	return m
}

// field returns the value of name=value in a CLIENT LIST line.
func field(line, name string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	return ""
}

// WaitAcked waits until n replicas acknowledge a write to s, a primary:
// after the initial sync a replica is not counted by WAIT until its first
// REPLCONF ACK, so a test of WithReplicaAck waits for this before its
// first lock. It writes a key of its own ("redisproc:acked") first, since
// WAIT on a connection that wrote nothing only counts replicas. It fails
// the test after 10 seconds.
func (s *Server) WaitAcked(ctx context.Context, n int) {
	s.t.Helper()
	c := s.adminClient()
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	for {
		pipe := c.Pipeline()
		pipe.Incr(ctx, "redisproc:acked")
		acked := pipe.Do(ctx, "WAIT", n, 100)
		_, err := pipe.Exec(ctx)
		if got, _ := acked.Int64(); err == nil && got >= int64(n) {
			return
		}
		select {
		case <-ctx.Done():
			s.t.Fatalf("redisproc: %s: %d replicas did not acknowledge a write (last error: %v)", s.Addr(), n, err)
		case <-time.After(pollEvery):
		}
	}
}
