//go:build unix

package redisproc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testkit/testenv"
)

// BinaryVar names the variable that may hold redis-server's path; without it
// the package looks for redis-server on PATH.
const BinaryVar = "REDFENCE_REDIS_SERVER"

// portAttempts bounds the retries when another process takes the free port
// before redis-server binds it.
const portAttempts = 5

// A Server is one redis-server the test controls. Its address and directory
// stay the same across [Server.Kill] and [Server.Restart]; its PID does not.
// A Server must not be copied.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	cfg  config

	mu      sync.Mutex
	proc    *proc   // the current or last run; nil before the first
	pids    []int   // every PID this Server started, for leak checks
	primary *Server // whom it replicates now; nil for a master
	clients []*redis.Client
	admin   *redis.Client
}

// Start starts a redis-server on a free port of 127.0.0.1 and waits until it
// answers. It listens on loopback only, keeps its files (log, AOF) in its own
// directory under t.TempDir(), saves no RDB snapshot, and is a master unless
// [WithReplicaOf] says otherwise. The process is killed by PID when the test
// ends; if the test failed, the end of its log is logged first.
//
// Start skips the test if redis-server cannot be found (see [BinaryVar]),
// or fails it under CI=true. It fails the test if the server is not ready
// within 10 seconds.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{t: t, bin: binary(t), cfg: config{fsync: "everysec"}}
	for _, o := range opts {
		o(&s.cfg)
	}
	switch s.cfg.fsync {
	case "always", "everysec", "no":
	default:
		t.Fatalf("redisproc: appendfsync %q: want always, everysec or no", s.cfg.fsync)
	}
	s.primary = s.cfg.replicaOf
	// TempDir first: cleanups run last-in first-out, so the process is dead
	// before its directory is removed.
	s.dir = t.TempDir()
	t.Cleanup(s.cleanup)
	var err error
	for range portAttempts {
		if s.port, err = freePort(); err != nil {
			break
		}
		if err = s.launch(); !errors.Is(err, errPortTaken) {
			break
		}
	}
	if err != nil {
		t.Fatalf("redisproc: start: %v\n%s", err, s.LogTail(20))
	}
	return s
}

func binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(BinaryVar); p != "" {
		return p
	}
	p, err := exec.LookPath("redis-server")
	if err == nil {
		return p
	}
	testenv.Missing(t, BinaryVar, // counted for the package's line of skips
		fmt.Sprintf("redisproc: redis-server not found on PATH and %s is not set: CI must run every redis-server test", BinaryVar),
		fmt.Sprintf("skipping redis-server test: install redis-server or set %s to its path", BinaryVar))
	return ""
}

// Addr returns the server's host:port on 127.0.0.1.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Dir returns the server's data directory; its log is Dir()/redis.log.
func (s *Server) Dir() string { return s.dir }

// PID returns the PID of the current process, or of the last one if the
// server is down.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc.cmd.Process.Pid
}

// PIDs returns every PID this Server has started, oldest first.
func (s *Server) PIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.pids...)
}

// Client returns a new client of the server, closed when the test ends.
// It has go-redis's defaults but for the address; configure may change any
// option. Its address survives [Server.Restart], so it reconnects.
func (s *Server) Client(configure ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: s.Addr()}
	for _, f := range configure {
		f(o)
	}
	c := redis.NewClient(o)
	s.mu.Lock()
	s.clients = append(s.clients, c)
	s.mu.Unlock()
	return c
}

// Pause freezes the process with SIGSTOP. Connections still open in the
// kernel, so commands neither fail nor answer until their timeout, as with a
// long GC pause or a stalled VM. It fails the test if the server is down.
func (s *Server) Pause() {
	s.t.Helper()
	s.signal(syscall.SIGSTOP)
}

// Resume continues a process frozen by [Server.Pause] or [Server.Isolate]
// with SIGCONT. It fails the test if the server is down.
func (s *Server) Resume() {
	s.t.Helper()
	s.signal(syscall.SIGCONT)
}

// Kill kills the process with SIGKILL, even a paused one, and waits until it
// has exited. Only what reached the AOF survives a later [Server.Restart].
// It fails the test if the server is already down.
func (s *Server) Kill() {
	s.t.Helper()
	p := s.signal(syscall.SIGKILL)
	if !p.waitExit() {
		s.t.Fatalf("redisproc: %s: pid %d did not exit within %v of SIGKILL", s.Addr(), p.cmd.Process.Pid, exitTimeout)
	}
}

// Stop shuts the server down gracefully with SIGTERM (and SIGCONT, in case it
// is paused) and waits until it has exited: Redis flushes the AOF, and writes
// an RDB only if save points were configured, which by default they are not.
// It fails the test if the server is already down or does not exit within 10
// seconds, after which it is killed.
func (s *Server) Stop() {
	s.t.Helper()
	p := s.signal(syscall.SIGTERM)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	if !p.waitExit() {
		_ = p.cmd.Process.Kill()
		p.waitExit()
		s.t.Fatalf("redisproc: %s: pid %d did not exit within %v of SIGTERM; killed\n%s", s.Addr(), p.cmd.Process.Pid, exitTimeout, s.LogTail(20))
	}
}

// Restart starts the server again after [Server.Kill] or [Server.Stop], on the
// same port and directory, so it reloads its AOF if it had one, and waits
// until it answers and has finished loading. A replica restarts as a replica
// of its current primary. It fails the test if the server is still running,
// if another process has taken its port meanwhile, or if it is not ready
// within 10 seconds.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if !p.exited() {
		s.t.Fatalf("redisproc: %s: restart of a running server (pid %d); Kill or Stop it first", s.Addr(), p.cmd.Process.Pid)
	}
	if err := s.launch(); err != nil {
		s.t.Fatalf("redisproc: %s: restart: %v\n%s", s.Addr(), err, s.LogTail(20))
	}
}

// Crash kills the server with SIGKILL, leaves it down for down, and
// restarts it: what an operator's or the kernel's kill followed by a
// supervisor's restart looks like. Only what reached the AOF survives; with
// no AOF the server comes back empty. It fails the test as [Server.Kill]
// and [Server.Restart] do.
func (s *Server) Crash(down time.Duration) {
	s.t.Helper()
	s.Kill()
	time.Sleep(down)
	s.Restart()
}

// LogTail returns the last n lines of the server's log, across restarts, to
// put in a failure message.
func (s *Server) LogTail(n int) string {
	b, err := os.ReadFile(s.logPath())
	if err != nil {
		return fmt.Sprintf("(no redis.log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// signal sends sig to the running process and returns it, or fails the test
// with the reason the process is not running.
func (s *Server) signal(sig syscall.Signal) *proc {
	s.t.Helper()
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p.exited() {
		s.t.Fatalf("redisproc: %s: %v to a server that is down (pid %d: %v)\n%s", s.Addr(), sig, p.cmd.Process.Pid, p.err, s.LogTail(20))
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redisproc: %s: %v to pid %d: %v", s.Addr(), sig, p.cmd.Process.Pid, err)
	}
	return p
}

// adminClient returns the package's own client of the server.
func (s *Server) adminClient() *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admin == nil {
		s.admin = redis.NewClient(s.adminOptions())
	}
	return s.admin
}

// cleanup closes the clients and kills the process; it runs when the test
// ends, however it ends.
func (s *Server) cleanup() {
	s.mu.Lock()
	p, clients := s.proc, s.clients
	if s.admin != nil {
		clients = append(clients, s.admin)
	}
	s.mu.Unlock()
	for _, c := range clients {
		_ = c.Close()
	}
	if p == nil {
		return
	}
	if s.t.Failed() {
		s.t.Logf("redisproc: %s (pid %d) log tail:\n%s", s.Addr(), p.cmd.Process.Pid, s.LogTail(20))
	}
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	if !p.waitExit() {
		s.t.Errorf("redisproc: %s: pid %d did not exit within %v of SIGKILL", s.Addr(), p.cmd.Process.Pid, exitTimeout)
	}
}
