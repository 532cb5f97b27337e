//go:build unix

package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testkit/testenv"
)

// sentinelProc is one redis-server --sentinel.
type sentinelProc struct {
	t    testing.TB
	dir  string
	port int
	proc *proc

	mu     sync.Mutex
	client *redis.SentinelClient
}

func startSentinel(t testing.TB, bin, conf string) *sentinelProc {
	t.Helper()
	s := &sentinelProc{t: t, dir: t.TempDir()}
	t.Cleanup(s.cleanup) // after TempDir: the process dies before its directory goes
	var err error
	for range portAttempts {
		if s.port, err = freePort(); err != nil {
			break
		}
		if err = s.launch(bin, conf); !errors.Is(err, errPortTaken) {
			break
		}
	}
	if errors.Is(err, errNoSentinel) {
		testenv.Missing(t, BinaryVar,
			fmt.Sprintf("redisproc: %v: CI must run every Sentinel test", err),
			fmt.Sprintf("skipping Sentinel test: %v; set %s to a redis-server with Sentinel", err, BinaryVar))
	}
	if err != nil {
		t.Fatalf("redisproc: start sentinel: %v\n%s", err, s.logTail(20))
	}
	return s
}

// errNoSentinel means redis-server did not run as a sentinel when asked to.
var errNoSentinel = errors.New("this redis-server has no Sentinel mode")

// launch writes the sentinel's config file, which Sentinel rewrites with
// what it learns, and starts it; on failure nothing is left running.
func (s *sentinelProc) launch(bin, conf string) error {
	path := filepath.Join(s.dir, "sentinel.conf")
	conf = fmt.Sprintf("port %d\nbind 127.0.0.1\ndaemonize no\ndir %q\nlogfile %q\n%s",
		s.port, s.dir, s.logPath(), conf)
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return err
	}
	out, err := os.OpenFile(filepath.Join(s.dir, "stdio.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	p, err := startProc(s.dir, out, bin, path, "--sentinel")
	if err != nil {
		return err
	}
	s.proc = p
	if err := s.waitReady(); err != nil {
		_ = p.cmd.Process.Kill()
		p.waitExit()
		return err
	}
	return nil
}

// waitReady waits until this process answers as a sentinel.
func (s *sentinelProc) waitReady() error {
	c := redis.NewClient(&redis.Options{Addr: s.addr(), Protocol: 2, DisableIdentity: true, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, PoolSize: 1})
	defer c.Close()
	pid := strconv.Itoa(s.proc.cmd.Process.Pid)
	deadline := time.Now().Add(readyTimeout)
	var last error
	for time.Now().Before(deadline) {
		if s.proc.exited() {
			news := s.logTail(20) + "\n" + readFrom(filepath.Join(s.dir, "stdio.log"), 0)
			if strings.Contains(news, "Address already in use") {
				return errPortTaken
			}
			return fmt.Errorf("redis-server --sentinel exited during startup: %v\n%s", s.proc.err, strings.TrimSpace(news))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := c.Info(ctx, "server").Result()
		cancel()
		switch f := parseInfo(info); {
		case err != nil:
			last = err
		case f["process_id"] != pid:
			last = fmt.Errorf("port %d answered by process_id %s, not ours (%s)", s.port, f["process_id"], pid)
		case f["redis_mode"] != "sentinel":
			return fmt.Errorf("%w: redis-server --sentinel runs in mode %q", errNoSentinel, f["redis_mode"])
		default:
			return nil
		}
		time.Sleep(pollEvery)
	}
	return fmt.Errorf("not ready within %v: %v", readyTimeout, last)
}

func (s *sentinelProc) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

func (s *sentinelProc) logPath() string { return filepath.Join(s.dir, "sentinel.log") }

func (s *sentinelProc) logTail(n int) string {
	lines := strings.Split(strings.TrimRight(readFrom(s.logPath(), 0), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// admin returns the package's own client of the sentinel.
func (s *sentinelProc) admin() *redis.SentinelClient {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		s.client = redis.NewSentinelClient(&redis.Options{Addr: s.addr(), Protocol: 2, DisableIdentity: true,
			MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second, PoolSize: 1, ContextTimeoutEnabled: true})
	}
	return s.client
}

// cleanup kills the process by PID and waits for it.
func (s *sentinelProc) cleanup() {
	s.mu.Lock()
	if s.client != nil {
		_ = s.client.Close()
	}
	s.mu.Unlock()
	p := s.proc
	if p == nil {
		return
	}
	if s.t.Failed() {
		s.t.Logf("redisproc: sentinel %s (pid %d) log tail:\n%s", s.addr(), p.cmd.Process.Pid, s.logTail(20))
	}
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	if !p.waitExit() {
		s.t.Errorf("redisproc: sentinel %s: pid %d did not exit within %v of SIGKILL", s.addr(), p.cmd.Process.Pid, exitTimeout)
	}
}
