package testenv

import (
	"bufio"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Monitor is a MONITOR of a real Redis server on a raw connection of its
// own: one line per command the server runs, those that scripts run
// included (marked "[0 lua]"). Other tests' commands on the same server
// show too, so a test keeps the lines that name its own keys.
type Monitor struct {
	t     testing.TB
	rdb   *redis.Client
	lines chan string
}

// NewMonitor starts MONITOR on rdb's server and returns once the server
// has confirmed it, so that every command sent after it shows. The
// connection closes when the test ends.
func NewMonitor(t testing.TB, rdb *redis.Client) *Monitor {
	t.Helper()
	conn, err := net.Dial("tcp", rdb.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	m := &Monitor{t: t, rdb: rdb, lines: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(conn)
		for sc.Scan() {
			m.lines <- sc.Text()
		}
		close(m.lines)
	}()
	m.until("+OK")
	return m
}

// Lines returns the lines of every command run since the last call, up to
// an ECHO it sends as a marker. It fails the test if the marker does not
// show within 10 seconds.
func (m *Monitor) Lines() []string {
	m.t.Helper()
	marker := "monitor-mark-" + randomHex(8)
	if err := m.rdb.Echo(m.t.Context(), marker).Err(); err != nil {
		m.t.Fatal(err)
	}
	return m.until(marker)
}

func (m *Monitor) until(want string) []string {
	m.t.Helper()
	var got []string
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-m.lines:
			if !ok {
				m.t.Fatalf("MONITOR ended before %q; saw %q", want, got)
			}
			if strings.Contains(l, want) {
				return got
			}
			got = append(got, l)
		case <-deadline:
			m.t.Fatalf("MONITOR never showed %q; saw %q", want, got)
		}
	}
}

// ScriptCommands returns the commands (upper case) that scripts ran on the
// keys named, from lines of Lines, in order. A command naming no key (TIME)
// is not among them.
func ScriptCommands(lines []string, keys ...string) []string {
	var out []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 5 || !strings.Contains(l, "[0 lua]") {
			continue
		}
		for _, k := range keys {
			if f[4] == strconv.Quote(k) {
				cmd, _ := strconv.Unquote(f[3])
				out = append(out, strings.ToUpper(cmd))
				break
			}
		}
	}
	return out
}

// GoroutineID is the running goroutine's ID, read from its stack header
// ("goroutine 42 [running]:"): for tests of which goroutine runs a call.
func GoroutineID() uint64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := strings.Fields(string(buf))
	id, _ := strconv.ParseUint(f[1], 10, 64)
	return id
}
