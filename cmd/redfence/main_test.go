package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
)

// cli runs a command line and returns its exit status and output.
func cli(t *testing.T, ctx context.Context, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = execute(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// The demo checks its own story (the late write must be refused) and fails
// otherwise; run it against every store on the embedded Redis, and on the
// real servers when they are configured.
func TestDemo(t *testing.T) {
	cases := []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"embedded/memory", func(*testing.T) []string { return nil }},
		{"embedded/redis", func(*testing.T) []string { return []string{"--store", "redis"} }},
		{"redlock/memory", func(*testing.T) []string { return []string{"--redlock"} }},
		{"embedded/memory/http", func(*testing.T) []string { return []string{"--http"} }},
		{"embedded/postgres/http", func(t *testing.T) []string {
			return []string{"--http", "--store", "postgres", "--postgres", testenv.PostgresURL(t)}
		}},
		{"embedded/sqlite", func(*testing.T) []string { return []string{"--store", "sqlite"} }},
		{"embedded/postgres", func(t *testing.T) []string {
			return []string{"--store", "postgres", "--postgres", testenv.PostgresURL(t)}
		}},
		{"embedded/mysql", func(t *testing.T) []string {
			return []string{"--store", "mysql", "--mysql", testenv.MySQLDSN(t)}
		}},
		{"embedded/s3", func(t *testing.T) []string {
			return []string{"--store", "s3", "--s3-endpoint", testenv.S3Endpoint(t), "--s3-bucket", "redfence-cli-test"}
		}},
		{"redis/redis", func(t *testing.T) []string {
			return []string{"--redis", testenv.RedisAddr(t), "--store", "redis", "--prefix", "redfence-cli-test"}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := cli(t, t.Context(), append([]string{"demo"}, c.args(t)...)...)
			require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			require.Contains(t, out, "reentered from a nested section")
			require.Contains(t, out, "REFUSED")
			require.Contains(t, out, `The store holds "final by B"`)
		})
	}
}

// demo --rw checks its own story (the paused writer's late write and the
// paused reader's late fenced read must be refused) and fails otherwise;
// run it against the stores on the embedded Redis, and on the real servers
// when they are configured.
func TestDemoRW(t *testing.T) {
	cases := []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"embedded/memory", func(*testing.T) []string { return nil }},
		{"embedded/redis", func(*testing.T) []string { return []string{"--store", "redis"} }},
		{"embedded/sqlite", func(*testing.T) []string { return []string{"--store", "sqlite"} }},
		{"embedded/postgres", func(t *testing.T) []string {
			return []string{"--store", "postgres", "--postgres", testenv.PostgresURL(t)}
		}},
		{"embedded/mysql", func(t *testing.T) []string {
			return []string{"--store", "mysql", "--mysql", testenv.MySQLDSN(t)}
		}},
		{"redis/redis", func(t *testing.T) []string {
			return []string{"--redis", testenv.RedisAddr(t), "--store", "redis", "--prefix", "redfence-cli-test"}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := cli(t, t.Context(), append([]string{"demo", "--rw"}, c.args(t)...)...)
			require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			for _, want := range []string{
				`(?m)^redfence demo --rw: read-write lock "report-[0-9a-f]{6}"`,
				`(?m)^ +\d+ms  A  took the write lease: token (\d+)$`,
				`(?m)^ +\d+ms  A  is paused .* for 1\.5s\.\.\.$`,
				`(?m)^ +\d+ms  B  took the write lease: token \d+ \(A's lease ran out\)$`,
				`(?m)^ +\d+ms  A  wrote "late by A" with token \d+: REFUSED \(.*stale token.*\)$`,
				`(?m)^ +\d+ms  R  took a read lease: epoch \d+, the token of the last write lease granted \(B's\)$`,
				`(?m)^ +\d+ms  R  read "v2 by B" \(written with token \d+\) at epoch \d+: current$`,
				`(?m)^ +\d+ms  C  took the write lease: token \d+ \(R's lease ran out\)$`,
				`(?m)^ +\d+ms  R  read at epoch \d+: REFUSED \(.*a newer writer wrote it since the reader's epoch.*\)$`,
				`(?m)^The store holds "v3 by C", written with token \d+\.$`,
			} {
				require.Regexp(t, want, out)
			}
			// The story's order: each step after the one before.
			last := -1
			for _, step := range []string{"A  took the write lease", `B  took the write lease`, `A  wrote "late by A"`,
				"R  took a read lease", "C  took the write lease", "R  read at epoch"} {
				i := strings.Index(out, step)
				require.Greater(t, i, last, "%q out of order in:\n%s", step, out)
				last = i
			}
		})
	}
}

// staleReads is a broken store whose Get returns the first record it
// returned for a key, as a lagging replica would: a fenced read through it
// misses the newer writer's record.
type staleReads struct {
	storage.Store
	mu    sync.Mutex
	first map[string]storage.Record
}

func (s *staleReads) Get(ctx context.Context, key string) (storage.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.first[key]; ok {
		return r, nil
	}
	r, err := s.Store.Get(ctx, key)
	if err == nil {
		s.first[key] = r
	}
	return r, err
}

// A store that does not fence fails demo --rw's safety check on the late
// write, and one whose reads lag on the late read: exit status 3.
func TestDemoRWUnsafe(t *testing.T) {
	t.Parallel()
	_, rdb := testenv.Mini(t)
	newLock := func(opts ...reentrant.ClientOption) (*reentrant.Client, error) { return reentrant.New(rdb, opts...) }
	for _, c := range []struct {
		store storage.Store
		want  string
	}{
		{&unfenced{rec: map[string]storage.Record{}}, "ACCEPTED A's late write"},
		{&staleReads{Store: memory.New(), first: map[string]storage.Record{}}, `RETURNED "v2 by B"`},
	} {
		var out bytes.Buffer
		err := playRW(t.Context(), &out, newLock, "redfence", c.store, "miniredis", "broken")
		require.ErrorContains(t, err, c.want, "output:\n%s", out.String())
		require.Equal(t, exitUnsafe, exitCode(t.Context(), fmt.Errorf("demo: %w", err)))
	}
}

// With --prefix every key the demo writes, the locks' and the redis
// store's, carries the prefix.
func TestDemoPrefix(t *testing.T) {
	t.Parallel()
	m, _ := testenv.Mini(t)
	code, out, errOut := cli(t, t.Context(), "demo", "--redis", m.Addr(), "--store", "redis", "--prefix", "acme:jobs")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, `(key prefix "acme:jobs")`)
	keys := m.Keys()
	require.NotEmpty(t, keys)
	// Released, the lock leaves only its slot's floor, P:{S}:f.
	var floor, record bool
	for _, k := range keys {
		require.True(t, strings.HasPrefix(k, "acme:jobs:"), "key %q lacks the prefix", k)
		floor = floor || strings.HasPrefix(k, "acme:jobs:{") && strings.HasSuffix(k, "}:f")
		record = record || strings.HasPrefix(k, "acme:jobs:store:{invoices/invoice-")
	}
	require.True(t, floor && record, "want the lock's floor and a store record among %q", keys)
}

// unfenced is a broken store that accepts every write.
type unfenced struct {
	mu  sync.Mutex
	rec map[string]storage.Record
}

func (s *unfenced) Get(_ context.Context, key string) (storage.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rec[key]
	if !ok {
		return r, storage.ErrNotFound
	}
	return r, nil
}

func (s *unfenced) Put(_ context.Context, key string, value []byte, token fence.Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rec[key] = storage.Record{Value: value, Token: token}
	return nil
}

func (s *unfenced) Delete(context.Context, string, fence.Token) error    { return nil }
func (s *unfenced) Highest(context.Context, string) (fence.Token, error) { return fence.None, nil }

// A store that does not fence fails the demo's safety check: exit status 3.
func TestDemoUnsafe(t *testing.T) {
	t.Parallel()
	_, rdb := testenv.Mini(t)
	var out bytes.Buffer
	newLock := func(opts ...reentrant.ClientOption) (*reentrant.Client, error) { return reentrant.New(rdb, opts...) }
	for _, viaHTTP := range []bool{false, true} {
		err := playPause(t.Context(), &out, newLock, "redfence", &unfenced{rec: map[string]storage.Record{}}, viaHTTP, "miniredis", "unfenced")
		require.ErrorContains(t, err, "ACCEPTED A's late write", "through HTTP: %v", viaHTTP)
		require.Equal(t, exitUnsafe, exitCode(t.Context(), fmt.Errorf("demo: %w", err)))
	}
}

func TestExitCodes(t *testing.T) {
	t.Setenv(postgresURLVar, "")
	t.Setenv(s3EndpointVar, "")
	long := strings.Repeat("p", 257)
	for _, c := range []struct {
		code int
		args []string
	}{
		{exitUsage, nil},
		{exitUsage, []string{"nope"}},
		{exitUsage, []string{"--redis", "127.0.0.1:1", "demo"}},
		{exitUsage, []string{"help", "nope"}},
		{exitUsage, []string{"help", "demo", "inspect"}},
		{exitUsage, []string{"demo", "--bogus"}},
		{exitUsage, []string{"demo", "extra"}},
		{exitUsage, []string{"demo", "--redis"}},
		{exitUsage, []string{"demo", "--redlock", "--redis", "127.0.0.1:6379"}},
		{exitUsage, []string{"demo", "--rw", "--redlock"}},
		{exitUsage, []string{"demo", "--rw", "--http"}},
		{exitUsage, []string{"demo", "--redis", "no-port"}},
		{exitUsage, []string{"demo", "--store", "bogus"}},
		{exitUsage, []string{"demo", "--store", "postgres"}},
		{exitUsage, []string{"demo", "--store", "s3"}},
		{exitUsage, []string{"demo", "--prefix", ""}},
		{exitUsage, []string{"demo", "--prefix", "a{b"}},
		{exitUsage, []string{"demo", "--prefix", long}},
		{exitUsage, []string{"inspect"}},
		{exitUsage, []string{"inspect", "--redis", "127.0.0.1:1"}},
		{exitUsage, []string{"inspect", "x"}},
		{exitUsage, []string{"inspect", "", "--redis", "127.0.0.1:1"}},
		{exitUsage, []string{"inspect", "x", "y", "--redis", "127.0.0.1:1"}},
		{exitUsage, []string{"inspect", "x", "--redis", "127.0.0.1:1", "--bogus"}},
		{exitUsage, []string{"inspect", "x", "--redis", "127.0.0.1:1", "--json=maybe"}},
		{exitUsage, []string{"inspect", "x", "--redis", "127.0.0.1:1", "--prefix", "}"}},
		{exitUsage, []string{"inspect", "x", "--redis", "127.0.0.1:1", "--prefix", ""}},
		{exitUsage, []string{"inspect", "x", "--redis", "127.0.0.1"}},
		{exitFailure, []string{"demo", "--redis", "127.0.0.1:1"}},
		{exitFailure, []string{"inspect", "x", "--redis", "127.0.0.1:1"}},
	} {
		code, out, errOut := cli(t, t.Context(), c.args...)
		require.Equal(t, c.code, code, "%q: stdout %q, stderr %q", c.args, out, errOut)
		require.Empty(t, out, "%q", c.args)
		require.True(t, strings.HasPrefix(errOut, "redfence: "), "%q: stderr %q", c.args, errOut)
		if c.code == exitUsage {
			require.Regexp(t, `Run 'redfence( demo| inspect)? --help' for usage.\n$`, errOut, "%q", c.args)
		}
	}
}

// SIGINT cancels main's context; whatever the command then returns, the
// exit status says it was interrupted.
func TestInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	code, _, errOut := cli(t, ctx, "demo")
	require.Equal(t, exitInterrupted, code, errOut)
}

// Every command parses every one of its flags, with the flags before or
// after its arguments.
func TestFlagsParsed(t *testing.T) {
	var d demoConfig
	fs := demoFlags(&d)
	pos, help, err := parseArgs(lookup("demo"), fs,
		[]string{"--redis", "h:1", "-prefix=p", "--store", "sqlite", "--postgres", "postgres://x", "--redlock", "--mysql", "u@tcp(h:3)/d", "--http",
			"--s3-endpoint", "http://h:4", "--s3-bucket", "b", "--rw"}, nil)
	require.NoError(t, err)
	require.False(t, help)
	require.Empty(t, pos)
	require.Equal(t, demoConfig{redisAddr: "h:1", prefix: "p", store: "sqlite", postgresURL: "postgres://x", mysqlDSN: "u@tcp(h:3)/d",
		s3Endpoint: "http://h:4", s3Bucket: "b", redlock: true, http: true, rw: true}, d)
	requireAllSet(t, fs)

	var i inspectConfig
	fs = inspectFlags(&i)
	pos, help, err = parseArgs(lookup("inspect"), fs, []string{"--redis", "h:2", "lock-a", "--prefix", "q", "--json"}, nil)
	require.NoError(t, err)
	require.False(t, help)
	require.Equal(t, []string{"lock-a"}, pos)
	require.Equal(t, inspectConfig{target: target{redisAddr: "h:2", prefix: "q"}, json: true}, i)
	requireAllSet(t, fs)

	var u unlockConfig
	fs = unlockFlags(&u)
	pos, help, err = parseArgs(lookup("unlock"), fs, []string{"--force", "lock-b", "--redis", "h:3", "--prefix", "r", "--yes"}, nil)
	require.NoError(t, err)
	require.False(t, help)
	require.Equal(t, []string{"lock-b"}, pos)
	require.Equal(t, unlockConfig{target: target{redisAddr: "h:3", prefix: "r"}, force: true, yes: true}, u)
	requireAllSet(t, fs)

	var l listConfig
	fs = listFlags(&l)
	pos, help, err = parseArgs(lookup("list"), fs, []string{"--json", "--redis", "h:4", "--prefix", "s"}, nil)
	require.NoError(t, err)
	require.False(t, help)
	require.Empty(t, pos)
	require.Equal(t, listConfig{target: target{redisAddr: "h:4", prefix: "s"}, json: true}, l)
	requireAllSet(t, fs)

	// "--" ends the flags: a name may start with a dash.
	pos, _, err = parseArgs(lookup("inspect"), inspectFlags(new(inspectConfig)), []string{"--json", "--", "-odd", "--json"}, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"-odd", "--json"}, pos)
}

// requireAllSet fails unless the test set every flag fs has.
func requireAllSet(t *testing.T, fs *flag.FlagSet) {
	t.Helper()
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	fs.VisitAll(func(f *flag.Flag) { require.True(t, set[f.Name], "flag --%s of %s is not tested", f.Name, fs.Name()) })
}

// Every way of asking for help prints, to stdout and with status 0, every
// flag of the commands it covers, with its default, and the exit statuses.
func TestHelp(t *testing.T) {
	all := []string{"demo", "inspect", "unlock"}
	for _, c := range []struct {
		args []string
		cmds []string
	}{
		{[]string{"--help"}, all},
		{[]string{"-h"}, all},
		{[]string{"help"}, all},
		{[]string{"help", "--help"}, all},
		{[]string{"help", "demo"}, []string{"demo"}},
		{[]string{"help", "inspect"}, []string{"inspect"}},
		{[]string{"demo", "--help"}, []string{"demo"}},
		{[]string{"demo", "-h"}, []string{"demo"}},
		{[]string{"demo", "--store", "redis", "-help"}, []string{"demo"}},
		{[]string{"inspect", "--help"}, []string{"inspect"}},
		{[]string{"inspect", "NAME", "-h"}, []string{"inspect"}},
		{[]string{"unlock", "--force", "NAME", "--help"}, []string{"unlock"}},
		{[]string{"help", "unlock"}, []string{"unlock"}},
	} {
		code, out, errOut := cli(t, t.Context(), c.args...)
		require.Equal(t, exitOK, code, "%q", c.args)
		require.Empty(t, errOut, "%q", c.args)
		for _, name := range c.cmds {
			cmd := lookup(name)
			require.Contains(t, out, "Usage: redfence "+cmd.synopsis, "%q", c.args)
			cmd.flags().VisitAll(func(f *flag.Flag) {
				require.Regexp(t, `(?m)^  --`+f.Name+`( |$)`, out, "%q lacks --%s", c.args, f.Name)
				if f.DefValue != "" {
					require.Contains(t, out, "(default "+quoteDefault(f)+")", "%q: --%s", c.args, f.Name)
				}
			})
		}
		require.Contains(t, out, "--help", "%q", c.args)
		require.Contains(t, out, "Exit status:\n"+exitStatusDoc, "%q", c.args)
	}
}
