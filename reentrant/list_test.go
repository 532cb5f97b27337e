package reentrant_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// listed runs c.List to its end and returns the states by name; it fails
// the test on any error, and on a name listed twice.
func listed(t *testing.T, c *reentrant.Client) map[string]reentrant.State {
	t.Helper()
	out := map[string]reentrant.State{}
	for st, err := range c.List(t.Context()) {
		require.NoError(t, err)
		_, dup := out[st.Name]
		require.False(t, dup, "%q listed twice", st.Name)
		out[st.Name] = st
	}
	return out
}

// List yields every held lock under the prefix, with what Inspect says of
// it, and nothing else: not released names, not names under another
// prefix, not a lock's other keys.
func TestListHeldLocks(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, p := t.Context(), testenv.Unique(t)+"*?[x]"
		c := newClient(t, b.Client, reentrant.WithPrefix(p))
		other := newClient(t, b.Client, reentrant.WithPrefix(p+"x"))
		names := []string{"a", "b{c}", "%7B", "orders:42", "with space", "é"}
		held := map[string]*reentrant.Lease{}
		for i, name := range names {
			l, err := c.Lock(ctx, name, reentrant.WithMetadata(fmt.Sprint("job ", i)))
			require.NoError(t, err)
			held[name] = l
		}
		inner, err := c.Lock(held["a"].Context(), "a")
		require.NoError(t, err)
		waiting := make(chan error, 1)
		go func() {
			l, err := c.Lock(ctx, "orders:42")
			if err == nil {
				err = l.Unlock(context.Background())
			}
			waiting <- err
		}()
		require.Eventually(t, func() bool {
			st, err := c.Inspect(ctx, "orders:42")
			return err == nil && st.Waiters == 1
		}, time.Minute, 5*time.Millisecond)
		released, err := c.Lock(ctx, "released")
		require.NoError(t, err)
		require.NoError(t, released.Unlock(ctx))
		_, err = other.Lock(ctx, "elsewhere")
		require.NoError(t, err)

		got := listed(t, c)
		require.ElementsMatch(t, names, slices.Collect(maps.Keys(got)))
		for name, l := range held {
			st := got[name]
			require.True(t, st.Held)
			require.Equal(t, l.Token(), st.Token, name)
			require.Equal(t, string(l.Owner()), st.Owner, name)
			require.Positive(t, st.TTL, name)
			require.LessOrEqual(t, st.TTL, reentrant.DefaultTTL, name)
		}
		require.EqualValues(t, 2, got["a"].Depth)
		require.EqualValues(t, 1, got["b{c}"].Depth)
		require.EqualValues(t, 1, got["orders:42"].Waiters)
		require.Equal(t, "job 2", got["%7B"].Meta)

		// Breaking out of the loop stops the walk.
		n := 0
		for _, err := range c.List(ctx) {
			require.NoError(t, err)
			if n++; n == 2 {
				break
			}
		}
		require.Equal(t, 2, n)

		require.NoError(t, inner.Unlock(ctx))
		require.NoError(t, held["orders:42"].Unlock(ctx))
		require.NoError(t, <-waiting)
		require.NoError(t, held["a"].Unlock(ctx))
		got = listed(t, c)
		require.ElementsMatch(t, []string{"b{c}", "%7B", "with space", "é"}, slices.Collect(maps.Keys(got)))
	})
}

// Data of another program under the prefix, at a lock hash's key, is
// reported with the name and ErrForeign, and the walk goes on.
func TestListReportsForeignKeys(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, p := t.Context(), testenv.Unique(t)
		c := newClient(t, b.Client, reentrant.WithPrefix(p))
		l, err := c.Lock(ctx, "mine")
		require.NoError(t, err)
		require.NoError(t, b.Client.Set(ctx, scripts.KeysFor(p, "theirs").Lock, "v", time.Minute).Err())
		require.NoError(t, b.Client.Set(ctx, p+":{bad%7b}", "v", time.Minute).Err()) // no name's key: passed over
		var names []string
		var foreign []string
		for st, err := range c.List(ctx) {
			if err != nil {
				require.ErrorIs(t, err, reentrant.ErrForeign)
				var op *reentrant.OpError
				require.ErrorAs(t, err, &op)
				require.Equal(t, "list", op.Op)
				foreign = append(foreign, st.Name)
				continue
			}
			names = append(names, st.Name)
		}
		require.Equal(t, []string{"mine"}, names)
		require.Equal(t, []string{"theirs"}, foreign)
		require.NoError(t, l.Unlock(ctx))
	})
}

// Thousands of held locks come out of many SCAN pages, each once.
func TestListManyLocks(t *testing.T) {
	// An hour's leases: taking 2,000 locks on a loaded machine's race
	// build (miniredis) can outlast a minute, and none may expire before
	// the walk.
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, p := t.Context(), testenv.Unique(t)
		c := newClient(t, b.Client, reentrant.WithPrefix(p), reentrant.WithTTL(time.Hour))
		const n = 2000
		want := map[string]fence.Token{}
		for i := range n {
			name := fmt.Sprint("n", i)
			l, err := c.Lock(ctx, name)
			require.NoError(t, err)
			want[name] = l.Token()
		}
		got := listed(t, c)
		require.Len(t, got, n)
		for name, tok := range want {
			require.Equal(t, tok, got[name].Token, name)
		}
	})
}

// The walk's own errors: a nil context, a zero or closed Client, a
// context that ends.
func TestListErrors(t *testing.T) {
	_, rdb := testenv.Mini(t)
	c := newClient(t, rdb)
	one := func(seq func(func(reentrant.State, error) bool)) error {
		var last error
		n := 0
		for _, err := range seq {
			last, n = err, n+1
		}
		require.Equal(t, 1, n, "one pair, the error")
		return last
	}
	//nolint:staticcheck // a nil context is the point
	require.ErrorIs(t, one(c.List(nil)), reentrant.ErrInvalid)
	require.ErrorIs(t, one((&reentrant.Client{}).List(t.Context())), reentrant.ErrInvalid)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, one(c.List(ctx)), context.Canceled)
	_, err := c.Lock(t.Context(), "x")
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.ErrorIs(t, one(c.List(t.Context())), reentrant.ErrClosed)
}

// On a Cluster the walk covers every primary.
func TestListCluster(t *testing.T) {
	cl := redisproc.StartCluster(t, redisproc.ClusterConfig{})
	rdb := cl.Client()
	c := newClient(t, rdb)
	want := map[*redisproc.Server][]string{}
	for _, m := range cl.Masters() {
		for i := range 3 {
			name := testenv.NameWhere(prefix, fmt.Sprint("on-", m.Addr(), "-", i), func(slot int) bool { return cl.MasterOf(slot) == m })
			_, err := c.Lock(t.Context(), name)
			require.NoError(t, err)
			want[m] = append(want[m], name)
		}
	}
	got := listed(t, c)
	var all []string
	for m, names := range want {
		require.NotEmpty(t, names, m.Addr())
		all = append(all, names...)
	}
	require.ElementsMatch(t, all, slices.Collect(maps.Keys(got)))
}

// With NewRedlock a lock is listed when a majority hold it, also with a
// minority of nodes down; a hold on a minority alone is not a lock.
func TestListRedlock(t *testing.T) {
	eachRedlock(t, 3, func(t *testing.T, s redlockSet) {
		ctx := t.Context()
		p := testenv.Unique(t)
		for _, node := range s.nodes { // joined long ago, as newRedlock's
			require.NoError(t, node.SetNX(ctx, scripts.JoinedKey(p), "1", 0).Err())
		}
		c := newRedlock(t, s.nodes, reentrant.WithPrefix(p))
		var want []string
		for i := range 5 {
			name := fmt.Sprint("r", i)
			want = append(want, name)
			// Every node holds it before a node goes down. A node may grant
			// after the acquisition returned, on its majority, or (its
			// request lost on a loaded machine) not at all: then the lock is
			// given back and taken again, within a generous ceiling.
			everyNode := func(l *reentrant.Lease) bool {
				for _, node := range s.nodes {
					st, err := scripts.Inspect(ctx, node, scripts.KeysFor(p, name))
					if err != nil || !st.Held || st.Token != l.Token() {
						return false
					}
				}
				return true
			}
			held := false
			for give := time.Now().Add(time.Minute); !held && time.Now().Before(give); {
				l, err := c.Lock(ctx, name)
				require.NoError(t, err)
				for wait := time.Now().Add(5 * time.Second); !held && time.Now().Before(wait); {
					held = everyNode(l)
					time.Sleep(5 * time.Millisecond)
				}
				if !held {
					require.NoError(t, l.Unlock(ctx))
				}
			}
			require.True(t, held, "%s: held on every node", name)
		}
		// A hold on one node only: an acquisition that got no majority.
		minority, err := reentrant.New(s.nodes[0], reentrant.WithPrefix(p))
		require.NoError(t, err)
		t.Cleanup(func() { _ = minority.Close() })
		_, err = minority.Lock(ctx, "minority")
		require.NoError(t, err)

		require.ElementsMatch(t, want, slices.Collect(maps.Keys(listed(t, c))))
		s.down(2)
		require.ElementsMatch(t, want, slices.Collect(maps.Keys(listed(t, c))), "one of three down")
		s.down(1)
		var err2 error
		for _, err := range c.List(ctx) {
			if err != nil {
				err2 = err
			}
		}
		require.Error(t, err2, "two of three down: no majority to list from")
	})
}

// List shows held read-write locks and semaphores beside locks, each with
// its holders, and a name's three locks as three entries.
func TestListShared(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, err := reentrant.New(b.Client, reentrant.WithPrefix(testenv.Unique(t)))
		require.NoError(t, err)
		defer c.Close()
		ctx := t.Context()
		l, err := c.Lock(ctx, "x")
		require.NoError(t, err)
		rw := c.RWMutex("x")
		r1, err := rw.RLock(ctx)
		require.NoError(t, err)
		r2, err := rw.RLock(ctx)
		require.NoError(t, err)
		p, err := c.Semaphore("x", 3).Acquire(ctx)
		require.NoError(t, err)
		w, err := c.RWMutex("y").Lock(ctx)
		require.NoError(t, err)

		got := map[string][]string{}
		for st, err := range c.List(ctx) {
			require.NoError(t, err)
			var hs []string
			for _, h := range st.Holders {
				hs = append(hs, fmt.Sprintf("%s %s %d %d", h.Meta, h.Owner, h.Token, h.Slot))
			}
			slices.Sort(hs)
			key := st.Name
			if len(hs) > 0 {
				key += " " + st.Holders[0].Meta
			}
			got[key] = hs
		}
		reads := []string{fmt.Sprintf("read %s %d 0", r1.Owner(), r1.Token()), fmt.Sprintf("read %s %d 0", r2.Owner(), r2.Token())}
		slices.Sort(reads)
		require.Equal(t, map[string][]string{
			"x":        nil,
			"x read":   reads,
			"x permit": {fmt.Sprintf("permit %s %d %d", p.Owner(), p.Token(), p.Slot())},
			"y write":  {fmt.Sprintf("write %s %d 0", w.Owner(), w.Token())},
		}, got)
		for _, u := range []interface{ Unlock(context.Context) error }{l, r1, r2, p, w} {
			require.NoError(t, u.Unlock(ctx))
		}
		for st, err := range c.List(ctx) {
			require.NoError(t, err)
			t.Fatalf("listed after every release: %+v", st)
		}
	})
}
