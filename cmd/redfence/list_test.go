package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// listJSON runs list --json and decodes its lines, one lockView each, with
// no field the view lacks.
func listJSON(t *testing.T, args ...string) (views map[string]lockView, code int, stderr string) {
	t.Helper()
	code, out, stderr := cli(t, t.Context(), append([]string{"list", "--json"}, args...)...)
	views = map[string]lockView{}
	for line := range strings.Lines(out) {
		var v lockView
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&v), line)
		_, dup := views[v.Name]
		require.False(t, dup, "%q listed twice", v.Name)
		views[v.Name] = v
	}
	return views, code, stderr
}

// list prints the held locks under the prefix, as a table and as JSON
// lines, and nothing of released names or of other prefixes.
func TestList(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		addr, prefix := b.Client.Options().Addr, testenv.Unique(t)
		locks, err := reentrant.New(b.Client, reentrant.WithPrefix(prefix))
		require.NoError(t, err)
		t.Cleanup(func() { _ = locks.Close() })

		_, out, errOut := cli(t, t.Context(), "list", "--redis", addr, "--prefix", prefix)
		require.Equal(t, "no lock held under prefix "+prefix+"\n", out, errOut)
		views, code, errOut := listJSON(t, "--redis", addr, "--prefix", prefix)
		require.Equal(t, exitOK, code, errOut)
		require.Empty(t, views)

		held := map[string]*reentrant.Lease{}
		for _, name := range []string{"orders:1", "with\ttab", " padded "} {
			l, err := locks.Lock(t.Context(), name, reentrant.WithMetadata(fmt.Sprintf("job %q", name)))
			require.NoError(t, err)
			held[name] = l
		}
		released, err := locks.Lock(t.Context(), "released")
		require.NoError(t, err)
		require.NoError(t, released.Unlock(t.Context()))

		views, code, errOut = listJSON(t, "--prefix", prefix, "--redis", addr)
		require.Equal(t, exitOK, code, errOut)
		require.Len(t, views, len(held))
		for name, l := range held {
			v := views[name]
			require.True(t, v.Held, name)
			require.Equal(t, prefix, v.Prefix)
			require.Equal(t, uint64(l.Token()), v.Token, name)
			require.Equal(t, string(l.Owner()), v.Owner, name)
			require.Equal(t, fmt.Sprintf("job %q", name), v.Meta)
			require.Equal(t, leaseActive, v.Lease)
			require.Positive(t, v.TTLMillis)
		}

		code, out, errOut = cli(t, t.Context(), "list", "--redis", addr, "--prefix", prefix)
		require.Equal(t, exitOK, code, errOut)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		require.Len(t, lines, 1+len(held), out)
		require.Regexp(t, `^NAME +TOKEN +OWNER +DEPTH +TTL +WAITERS +META$`, lines[0])
		require.Contains(t, out, `"with\ttab"`, "a tab would split the column")
		require.Contains(t, out, `" padded "`)
		o := held["orders:1"]
		require.Regexp(t, fmt.Sprintf(`(?m)^orders:1 +%d +%s +1 +[0-9.]+m?s +0 +job "orders:1"$`, o.Token(), regexp.QuoteMeta(string(o.Owner()))), out)

		// Another program's value under the prefix: reported on stderr,
		// exit status 1, the locks still listed.
		require.NoError(t, b.Client.Set(t.Context(), scripts.KeysFor(prefix, "theirs").Lock, "v", 0).Err())
		t.Cleanup(func() { b.Client.Del(t.Context(), scripts.KeysFor(prefix, "theirs").Lock) })
		views, code, errOut = listJSON(t, "--redis", addr, "--prefix", prefix)
		require.Equal(t, exitFailure, code)
		require.Contains(t, errOut, `"theirs"`)
		require.Contains(t, errOut, "foreign")
		require.Len(t, views, len(held))
	})
}

func TestListUsage(t *testing.T) {
	for _, args := range [][]string{
		{"list"},
		{"list", "--redis", "127.0.0.1:1", "extra"},
		{"list", "--redis", "nohost"},
		{"list", "--redis", "127.0.0.1:1", "--prefix", "a{b"},
	} {
		code, _, errOut := cli(t, t.Context(), args...)
		require.Equal(t, exitUsage, code, "%q: %s", args, errOut)
		require.Contains(t, errOut, "redfence list --help", "%q", args)
	}
	code, _, errOut := cli(t, t.Context(), "list", "--redis", "127.0.0.1:1")
	require.Equal(t, exitFailure, code, errOut)
}

// On a Cluster, list (given any one primary's address) covers every
// primary, and inspect finds a lock on another primary than the one named.
func TestListCluster(t *testing.T) {
	cl := redisproc.StartCluster(t, redisproc.ClusterConfig{})
	prefix := testenv.Unique(t)
	locks, err := reentrant.New(cl.Client(), reentrant.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = locks.Close() })
	masters := cl.Masters()
	want := map[string]uint64{}
	for _, m := range masters {
		for i := range 2 {
			name := testenv.NameWhere(prefix, fmt.Sprint("on-", m.Addr(), "-", i), func(slot int) bool { return cl.MasterOf(slot) == m })
			l, err := locks.Lock(t.Context(), name)
			require.NoError(t, err)
			want[name] = uint64(l.Token())
		}
	}
	views, code, errOut := listJSON(t, "--redis", masters[0].Addr(), "--prefix", prefix)
	require.Equal(t, exitOK, code, errOut)
	got := map[string]uint64{}
	for name, v := range views {
		got[name] = v.Token
	}
	require.Equal(t, want, got)

	last := testenv.NameWhere(prefix, "elsewhere", func(slot int) bool { return cl.MasterOf(slot) == masters[len(masters)-1] })
	_, err = locks.Lock(t.Context(), last)
	require.NoError(t, err)
	v := inspectBoth(t, masters[0].Addr(), prefix, last)
	require.True(t, v.Held, "inspect through the first primary finds a lock on the last")
}

// list and inspect show an election term's value, not how the term is
// stored (its start and proclaim count before the value).
func TestListAndInspectShowATermsValue(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		addr, prefix := b.Client.Options().Addr, testenv.Unique(t)
		locks, err := reentrant.New(b.Client, reentrant.WithPrefix(prefix))
		require.NoError(t, err)
		t.Cleanup(func() { _ = locks.Close() })
		term, err := locks.Campaign(t.Context(), "leader", "e1 #1")
		require.NoError(t, err)
		require.NoError(t, term.Proclaim(t.Context(), "e1 #2"))

		_, out, errOut := cli(t, t.Context(), "list", "--redis", addr, "--prefix", prefix)
		require.Regexp(t, `(?m)^leader\s.*\se1 #2$`, out, errOut)
		views, _, errOut := listJSON(t, "--redis", addr, "--prefix", prefix)
		require.Equal(t, "e1 #2", views["leader"].Meta, errOut)
		_, out, errOut = cli(t, t.Context(), "inspect", "leader", "--redis", addr, "--prefix", prefix)
		require.Contains(t, out, "meta        e1 #2\n", errOut)
		require.NoError(t, term.Resign(t.Context()))
	})
}

// list shows a read-write lock's and a semaphore's holders, a row each.
func TestListShared(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		addr, prefix := b.Client.Options().Addr, testenv.Unique(t)
		locks, err := reentrant.New(b.Client, reentrant.WithPrefix(prefix))
		require.NoError(t, err)
		t.Cleanup(func() { _ = locks.Close() })
		ctx := t.Context()
		w, err := locks.RWMutex("doc").Lock(ctx)
		require.NoError(t, err)
		r, err := locks.RWMutex("doc").RLock(w.Context()) // the writer reads too
		require.NoError(t, err)
		p, err := locks.Semaphore("pool", 2).Acquire(ctx)
		require.NoError(t, err)

		_, out, errOut := cli(t, ctx, "list", "--redis", addr, "--prefix", prefix)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 4, "a header and a row per holder: %s%s", out, errOut)
		require.Regexp(t, fmt.Sprintf(`(?m)^doc +%d +%s +1 +\S+ +0 +write$`, w.Token(), w.Owner()), out)
		require.Regexp(t, fmt.Sprintf(`(?m)^doc +%d +%s +1 +\S+ +0 +read$`, r.Token(), r.Owner()), out)
		require.Regexp(t, fmt.Sprintf(`(?m)^pool +%d +%s +1 +\S+ +0 +permit slot 0$`, p.Token(), p.Owner()), out)

		views, code, errOut := listJSON(t, "--redis", addr, "--prefix", prefix)
		require.Equal(t, exitOK, code, errOut)
		require.Len(t, views["doc"].Holders, 2)
		require.Equal(t, "write", views["doc"].Holders[0].Meta)
		require.Equal(t, uint64(w.Token()), views["doc"].Token, "the writer's token")
		require.Equal(t, "permit slot 0", views["pool"].Holders[0].Meta)
		for _, l := range []*reentrant.Lease{r, w, p.Lease} {
			require.NoError(t, l.Unlock(ctx))
		}
	})
}
