package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/reentrant"
)

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
		{"embedded/sqlite", func(*testing.T) []string { return []string{"--store", "sqlite"} }},
		{"embedded/postgres", func(t *testing.T) []string {
			return []string{"--store", "postgres", "--postgres", testenv.PostgresURL(t)}
		}},
		{"redis/redis", func(t *testing.T) []string {
			return []string{"--redis", testenv.RedisAddr(t), "--store", "redis"}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			err := run(t.Context(), append([]string{"demo"}, c.args(t)...), &out, &errOut)
			require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
			s := out.String()
			require.Contains(t, s, "reentered from a nested section")
			require.Contains(t, s, "REFUSED")
			require.Contains(t, s, `The store holds "final by B"`)
		})
	}
}

func TestDemoBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "--store", "bogus"},
		{"demo", "--store", "postgres", "--postgres", ""},
		{"demo", "extra"},
		{"demo", "--redis", "127.0.0.1:1"},
		{"inspect", "x"},
		{"inspect", "--redis", "127.0.0.1:1"},
		{"nope"},
		{},
	} {
		var out, errOut bytes.Buffer
		require.Error(t, run(t.Context(), args, &out, &errOut), "%q", args)
	}
}

func TestInspect(t *testing.T) {
	addr := testenv.RedisAddr(t)
	var out, errOut bytes.Buffer
	name := testenv.Unique(t)
	require.NoError(t, run(t.Context(), []string{"inspect", name, "--redis", addr}, &out, &errOut))
	require.Contains(t, out.String(), "state       free")
	out.Reset()
	require.NoError(t, run(t.Context(), []string{"inspect", "--json", "--redis", addr, name}, &out, &errOut))
	require.True(t, strings.Contains(out.String(), `"held": false`), out.String())

	// After a full release, inspect says whose release it was.
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := reentrant.New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	l, err := c.Lock(t.Context(), name)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	out.Reset()
	require.NoError(t, run(t.Context(), []string{"inspect", name, "--redis", addr}, &out, &errOut))
	require.Contains(t, out.String(), fmt.Sprintf("released    token %d of %s", l.Token(), l.Owner()))
	out.Reset()
	require.NoError(t, run(t.Context(), []string{"inspect", "--json", "--redis", addr, name}, &out, &errOut))
	require.Contains(t, out.String(), fmt.Sprintf(`"owner": %q`, l.Owner()))
	require.Contains(t, out.String(), `"how": "released"`)
}
