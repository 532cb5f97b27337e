//go:build unix

package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// readyTimeout bounds how long a start or restart may take, AOF loading
	// included.
	readyTimeout = 10 * time.Second
	// exitTimeout bounds how long a signalled process may take to exit.
	exitTimeout = 10 * time.Second
	// pollEvery is how often the package re-checks a condition it waits for.
	pollEvery = 10 * time.Millisecond
)

// errPortTaken means redis-server could not bind its port: another process
// took it between freePort closing it and redis-server binding it.
var errPortTaken = errors.New("redisproc: port already in use")

// proc is one run of redis-server. A Server has one per start or restart.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // Wait's result; read it only after done is closed
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitExit waits, at most exitTimeout, for the process to exit.
func (p *proc) waitExit() bool {
	select {
	case <-p.done:
		return true
	case <-time.After(exitTimeout):
		return false
	}
}

// freePort returns a port on 127.0.0.1 that was free a moment ago. Another
// process may take it before redis-server binds it; [Start] retries then.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// args builds redis-server's command line from the server's current state,
// so a restart keeps the replication role the test last gave it.
func (s *Server) args() []string {
	aof, fsync := "no", s.cfg.fsync
	if s.cfg.aof {
		aof = "yes"
	}
	a := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", aof,
		"--appendfsync", fsync,
		"--dir", s.dir,
		"--logfile", s.logPath(),
		"--daemonize", "no",
		// Redis 7 waits 5s for more replicas before a diskless full sync;
		// tests have one replica per primary and no time to lose.
		"--repl-diskless-sync-delay", "0",
	}
	if s.primary != nil {
		a = append(a, "--replicaof", "127.0.0.1", strconv.Itoa(s.primary.port))
	}
	return append(a, s.cfg.extra...)
}

// launch starts redis-server on s.port and waits until it is ready. On
// failure nothing is left running.
// startProc starts bin with args in dir, its output to out, in a process
// group of its own, and reaps it when it exits.
func startProc(dir string, out *os.File, bin string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (s *Server) launch() error {
	// Errors redis-server prints before it opens its log file (a bad
	// argument, say) go to stdout or stderr.
	out, err := os.OpenFile(filepath.Join(s.dir, "stdio.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close() // the child has its own copy
	logStart, stdioStart := fileSize(s.logPath()), fileSize(out.Name())
	p, err := startProc(s.dir, out, s.bin, s.args()...)
	if err != nil {
		return err
	}
	cmd := p.cmd
	s.mu.Lock()
	s.proc = p
	s.pids = append(s.pids, cmd.Process.Pid)
	s.mu.Unlock()

	if err := s.waitReady(p, logStart, stdioStart); err != nil {
		_ = cmd.Process.Kill()
		p.waitExit()
		return err
	}
	return nil
}

// waitReady waits until the process answers and has finished loading its
// data. It checks the answering process_id, so a stranger that took the port
// is never mistaken for ours.
func (s *Server) waitReady(p *proc, logStart, stdioStart int64) error {
	c := redis.NewClient(s.adminOptions())
	defer c.Close()
	pid := strconv.Itoa(p.cmd.Process.Pid)
	deadline := time.Now().Add(readyTimeout)
	var last error
	for time.Now().Before(deadline) {
		if p.exited() {
			// Only this run's lines: an earlier attempt's bind failure
			// must not turn a later, different failure into a retry.
			news := readFrom(s.logPath(), logStart) + readFrom(filepath.Join(s.dir, "stdio.log"), stdioStart)
			if strings.Contains(news, "Address already in use") {
				return errPortTaken
			}
			return fmt.Errorf("redis-server exited during startup: %v\n%s", p.err, strings.TrimSpace(news))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := c.Info(ctx).Result()
		cancel()
		switch {
		case err != nil:
			last = err
		case parseInfo(info)["process_id"] != pid:
			last = fmt.Errorf("port %d answered by process_id %s, not ours (%s)", s.port, parseInfo(info)["process_id"], pid)
		case parseInfo(info)["loading"] != "0" || parseInfo(info)["async_loading"] == "1":
			last = errors.New("still loading")
		default:
			return nil
		}
		time.Sleep(pollEvery)
	}
	return fmt.Errorf("not ready within %v: %v", readyTimeout, last)
}

// adminOptions configures the package's own connections: no retries, so a
// frozen or dead server shows at once, and no handshake extras that Redis 7.0
// does not know.
func (s *Server) adminOptions() *redis.Options {
	return &redis.Options{
		Addr:                  s.Addr(),
		Protocol:              2,
		DisableIdentity:       true,
		MaxRetries:            -1,
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
		PoolSize:              1,
		ContextTimeoutEnabled: true,
	}
}

func (s *Server) logPath() string { return filepath.Join(s.dir, "redis.log") }

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readFrom returns the file's content from offset off on, or "".
func readFrom(path string, off int64) string {
	b, err := os.ReadFile(path)
	if err != nil || off > int64(len(b)) {
		return ""
	}
	return string(b[off:])
}

// parseInfo turns an INFO reply into a field map.
func parseInfo(info string) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}
