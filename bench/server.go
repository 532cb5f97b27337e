package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// serverVar names the variable that may hold redis-server's path; without it
// redis-server is looked up on PATH.
const serverVar = "REDFENCE_REDIS_SERVER"

// errNoServer reports that no redis-server binary was found.
var errNoServer = errors.New("bench: redis-server not found on PATH (or set " + serverVar + ")")

// server is a redis-server this process started: on a free port of
// 127.0.0.1, with no persistence, in the foreground so that it is stopped
// by its PID. On Linux the kernel kills it if this process dies first.
type server struct {
	addr   string
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // Wait's error, once exited is closed
}

// serverBinary returns the redis-server to start: bin if given, else
// $REDFENCE_REDIS_SERVER, else redis-server from PATH.
func serverBinary(bin string) (string, error) {
	if bin == "" {
		bin = os.Getenv(serverVar)
	}
	if bin == "" {
		bin = "redis-server"
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("%w: %v", errNoServer, err)
	}
	return p, nil
}

// startServer starts redis-server bin and waits until it answers PING.
// Another process can take the free port before redis-server binds it, so
// a server that exits at once is started again on another port.
func startServer(bin string) (*server, error) {
	dir, err := os.MkdirTemp("", "redfence-bench-")
	if err != nil {
		return nil, err
	}
	for range 5 {
		var s *server
		if s, err = launch(bin, dir); err == nil {
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

func launch(bin, dir string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(dir + "/redis.log")
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, cmd: cmd, exited: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(10 * time.Second); err != nil {
		s.kill()
		return nil, err
	}
	return s, nil
}

func (s *server) waitReady(limit time.Duration) error {
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	deadline := time.Now().Add(limit)
	for {
		select {
		case <-s.exited:
			log, _ := os.ReadFile(s.dir + "/redis.log")
			return fmt.Errorf("bench: redis-server on %s exited at start (%v): %s", s.addr, s.err, log)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: redis-server on %s not ready within %v: %w", s.addr, limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the server by its PID, SIGTERM first, SIGKILL after 5 s, waits
// for it, and removes its directory.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		s.kill()
	}
	_ = os.RemoveAll(s.dir)
}

func (s *server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
