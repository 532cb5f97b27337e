//go:build unix

package reentrant_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/hashslot"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// slotOf is the Cluster slot of name's lock keys.
func slotOf(name string) int { return hashslot.Of(scripts.KeysFor(prefix, name).Lock) }

// namesOnMasters returns one name under p per primary of c, ordered by
// slot (the order LockMulti takes them in), and a second name in the slot
// of the first.
func namesOnMasters(t *testing.T, c *redisproc.Cluster, p string) (names []string, twin string) {
	t.Helper()
	seen := map[string]bool{}
	for i := 0; len(names) < len(c.Masters()); i++ {
		n := fmt.Sprintf("%s/%d", p, i)
		if m := c.MasterOf(slotOf(n)).Addr(); !seen[m] {
			seen[m] = true
			names = append(names, n)
		}
	}
	slices.SortFunc(names, func(a, b string) int { return slotOf(a) - slotOf(b) })
	for i := 0; ; i++ {
		if n := fmt.Sprintf("%s/twin%d", p, i); slotOf(n) == slotOf(names[0]) {
			return names, n
		}
	}
}

// LockMulti across the slots of every primary: taken all at once, refused
// by a name on the last primary with the others given back, woken by that
// name's release, and an order storm across slots.
func TestClusterLockMulti(t *testing.T) {
	t.Parallel() // see TestMain
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{})
	cc := c.Client()
	// A two-minute TTL: the waiting call polls no more often than every
	// half minute, so only a wake message ends its wait within the ceiling.
	lc, other := newClient(t, cc, reentrant.WithTTL(2*time.Minute)), newClient(t, cc)
	ctx := t.Context()
	names, twin := namesOnMasters(t, c, testenv.Unique(t))
	all := append([]string{twin}, names...)

	m, err := lc.LockMulti(ctx, all)
	require.NoError(t, err)
	for _, n := range all {
		st, err := lc.Inspect(ctx, n)
		require.NoError(t, err)
		require.True(t, st.Held, n)
		require.Equal(t, m.Token(n), st.Token)
	}
	require.NoError(t, m.Unlock(ctx))

	last := names[len(names)-1]
	held, err := other.Lock(ctx, last)
	require.NoError(t, err)
	_, err = lc.TryLockMulti(ctx, all)
	var na *reentrant.NotAcquiredError
	require.ErrorAs(t, err, &na)
	require.Equal(t, []string{last}, na.Names)
	for _, n := range all[:len(all)-1] {
		st, err := lc.Inspect(ctx, n)
		require.NoError(t, err)
		require.False(t, st.Held, "%s: given back before TryLockMulti returned", n)
	}

	got := make(chan error, 1)
	go func() {
		m, err := lc.LockMulti(ctx, all, reentrant.WithRetry(reentrant.LinearBackoff(time.Minute)))
		if err == nil {
			err = m.Unlock(context.Background())
		}
		got <- err
	}()
	require.Eventually(t, func() bool {
		st, err := lc.Inspect(ctx, last)
		return err == nil && st.Waiters == 1
	}, time.Minute, 5*time.Millisecond)
	require.NoError(t, held.Unlock(ctx))
	requireWoken(t, got, "woken on the shard channel of the released name")

	orderStorm(t, lc, 3*time.Second)
}

// pauseAfterHook pauses a server once the first script call that names key
// has returned: a primary stopped in the middle of a LockMulti.
type pauseAfterHook struct {
	key   string
	pause func()
	once  sync.Once
}

func (h *pauseAfterHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *pauseAfterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		// A key argument is a string or the scripts' own type, which prints
		// as its key.
		if testenv.ScriptCall(cmd.Name()) && slices.ContainsFunc(cmd.Args(), func(a any) bool { return fmt.Sprint(a) == h.key }) {
			h.once.Do(h.pause)
		}
		return err
	}
}

func (h *pauseAfterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A primary stopped in the middle of a LockMulti across slots: the call
// fails by its deadline, and nothing stays held on the other primaries;
// once the primary is back, nothing of the call stays there either.
func TestClusterLockMultiPrimaryStopped(t *testing.T) {
	t.Parallel() // see TestMain
	// The stopped primary is not failed by the others while the test
	// looks (a long node timeout), and should a slow machine get there,
	// the live primaries still serve their slots (no full coverage).
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{NodeTimeout: time.Minute,
		Args: []string{"--cluster-require-full-coverage", "no"}})
	cc := c.Client()
	// A lease far longer than the test waits: what it finds free was
	// given back, not expired.
	lc := newClient(t, cc, reentrant.WithTTL(5*time.Minute))
	ctx := t.Context()
	names, _ := namesOnMasters(t, c, testenv.Unique(t))
	stopped := c.MasterOf(slotOf(names[len(names)-1]))
	cc.AddHook(&pauseAfterHook{key: scripts.KeysFor(prefix, names[0]).Lock, pause: stopped.Pause})

	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := lc.LockMulti(cctx, names)
	// The stopped primary runs its part when it resumes: the outcome is
	// unknown, and undone in the background.
	require.ErrorIs(t, err, reentrant.ErrOutcomeUnknown)
	require.NotErrorIs(t, err, reentrant.ErrNotAcquired)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// The deadline, and the cleanup budget beside it for each name given
	// back: a bound of the call, not of the machine.
	require.Less(t, time.Since(start), 2*time.Second+time.Duration(len(names)+1)*reentrant.CleanupBudget)
	for _, n := range names[:len(names)-1] {
		st, err := lc.Inspect(ctx, n)
		require.NoError(t, err)
		require.False(t, st.Held, "%s: given back on its live primary", n)
		require.Zero(t, st.Waiters, n)
	}

	stopped.Resume()
	require.Eventually(t, func() bool {
		st, err := lc.Inspect(ctx, names[len(names)-1])
		return err == nil && !st.Held && st.Waiters == 0
	}, time.Minute, 20*time.Millisecond, "undone on the primary once it answers")
	m, err := lc.TryLockMulti(ctx, names)
	require.NoError(t, err, "every name free again")
	require.NoError(t, m.Unlock(ctx))
}

// LockMulti through Sentinel (go-redis's failover client): one script
// takes every name, a refused try takes none, and a waiting call is woken
// by the release.
func TestSentinelLockMulti(t *testing.T) {
	t.Parallel() // see TestMain
	g := redisproc.StartSentinels(t, 1, 1)
	rdb := g.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, p := t.Context(), testenv.Unique(t)
	c := newClient(t, rdb, reentrant.WithTTL(2*time.Minute)) // polls half a minute apart: only a wake is quick
	d := newClient(t, rdb)
	names := []string{p + "/a", p + "/b", p + "/c"}
	held, err := d.Lock(ctx, names[1])
	require.NoError(t, err)
	_, err = c.TryLockMulti(ctx, names)
	var na *reentrant.NotAcquiredError
	require.ErrorAs(t, err, &na)
	require.Equal(t, []string{names[1]}, na.Names)
	require.Empty(t, keysLeft(t, rdb, names[0]))
	require.Empty(t, keysLeft(t, rdb, names[2]))

	got := make(chan error, 1)
	go func() {
		m, err := c.LockMulti(ctx, names)
		if err == nil {
			err = m.Unlock(context.Background())
		}
		got <- err
	}()
	require.Eventually(t, func() bool {
		st, err := c.Inspect(ctx, names[1])
		return err == nil && st.Waiters == 1
	}, time.Minute, 5*time.Millisecond)
	require.NoError(t, held.Unlock(ctx))
	requireWoken(t, got)
}
