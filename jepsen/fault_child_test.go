//go:build unix

package jepsen_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"
)

// faultChild is one holder process.
type faultChild struct {
	id     int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	noise  faultLockedBuffer // stderr and stdout lines that are not JSON
	done   bool              // printed {"kind":"done"}
	exited chan struct{}     // closed once reaped
}

type faultLockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *faultLockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() > 64<<10 {
		return len(p), nil // bounded: enough to diagnose
	}
	return b.b.Write(p)
}

func (b *faultLockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

type faultChildEvent struct {
	child *faultChild
	op    faultOp
	exit  bool
	err   error // the process's exit status, with exit
}

// faultStartChild starts one holder process.
func faultStartChild(t *testing.T, cfg faultHolderConfig, events chan<- faultChildEvent, quit <-chan struct{}) *faultChild {
	t.Helper()
	return faultStartHelper(t, cfg.Proc, "holder", "TestHelperHolderProcess", faultHolderConfigVar, cfg, events, quit)
}

// faultStartHelper starts process id: the test binary running test in
// helper mode mode (faultHelperVar), configured by cfg as JSON in the
// variable cfgVar. Its JSON lines on stdout are faultOps, sent to events
// with its exit.
func faultStartHelper(t *testing.T, id int, mode, test, cfgVar string, cfg any, events chan<- faultChildEvent, quit <-chan struct{}) *faultChild {
	t.Helper()
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &faultChild{id: id, exited: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.timeout=10m")
	c.cmd.Env = append(os.Environ(), faultHelperVar+"="+mode, cfgVar+"="+string(js))
	c.cmd.SysProcAttr = faultSysProcAttr()
	c.cmd.Stderr = &c.noise
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	send := func(ev faultChildEvent) bool {
		select {
		case events <- ev:
			return true
		case <-quit:
			return false
		}
	}
	go func() {
		defer close(c.exited)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			var op faultOp
			if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &op) != nil {
				fmt.Fprintf(&c.noise, "%s\n", line) // the testing package's PASS, or a failure
				continue
			}
			if !send(faultChildEvent{child: c, op: op}) {
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout) // Wait must come after every read
		err := c.cmd.Wait()
		send(faultChildEvent{child: c, exit: true, err: err})
	}()
	return c
}
