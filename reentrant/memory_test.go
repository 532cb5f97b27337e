//go:build unix

package reentrant_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/hashslot"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// lockAndRelease locks and releases each of n names "<base>-<i>" once on c,
// from a few goroutines.
func lockAndRelease(t *testing.T, c *reentrant.Client, base string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				l, err := c.Lock(context.Background(), base+"-"+strconv.Itoa(i))
				if err == nil {
					err = l.Unlock(context.Background())
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// usedMemory is the server's used_memory.
func usedMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(t.Context(), "memory").Result()
	require.NoError(t, err)
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no used_memory in INFO memory")
	return 0
}

// A service that locks per order or per request leaves, with the default
// options, no key of its own per released name: only the floors of the
// slots its names hash to (one key per slot and prefix, at most 16,384),
// each of which expires. On a real server (20,000 names) the test counts
// keys and measures used_memory per name; on miniredis it passes the
// floors' idle time: nothing is left.
func TestReleasedNameLeavesNoKey(t *testing.T) {
	t.Parallel() // see TestMain
	const names = 20_000
	srv := redisproc.Start(t)
	rdb := srv.Client()
	c := newClient(t, rdb)
	// Warm the client (scripts loaded, connections open) on a name that
	// FLUSHALL then deletes.
	lockAndRelease(t, c, "warm", 1)
	require.NoError(t, rdb.FlushAll(t.Context()).Err())
	before := usedMemory(t, rdb)
	lockAndRelease(t, c, "order", names)
	after := usedMemory(t, rdb)

	slots := map[int]bool{}
	for i := range names {
		slots[hashslot.Of(scripts.KeysFor(prefix, "order-"+strconv.Itoa(i)).Lock)] = true
	}
	var keys int
	iter := rdb.Scan(t.Context(), 0, "*", 1000).Iterator()
	for iter.Next(t.Context()) {
		key := iter.Val()
		keys++
		require.True(t, strings.HasSuffix(key, ":f"), "unexpected key %q: a released name leaves only its slot's floor", key)
		require.True(t, slots[hashslot.Of(key)], "floor %q is in the slot of a name locked", key)
		ttl := rdb.PTTL(t.Context(), key).Val()
		require.Greater(t, ttl, time.Duration(0), "every key expires: %s", key)
	}
	require.NoError(t, iter.Err())
	require.Equal(t, len(slots), keys, "one floor per slot of the names")
	perName := float64(after-before) / names
	t.Logf("SUMMARY released-names names=%d keys=%d slots=%d used_memory_per_name=%.0fB (floors)",
		names, keys, len(slots), perName)
	require.Less(t, perName, 100.0, "used_memory per released name")

	// The floors go the idle time (and up to a sixteenth more) after
	// their last write: only miniredis can pass it in a test. Fewer names:
	// the subject is what is left, not how much.
	const idle = 7 * 24 * time.Hour
	m, mrdb := testenv.Mini(t)
	mc := newClient(t, mrdb)
	lockAndRelease(t, mc, "order", 500)
	require.Zero(t, countKeys(t, mrdb, prefix+":{order-*"), "no released name keeps a key")
	require.Equal(t, countKeys(t, mrdb, "*"), countKeys(t, mrdb, "*:f"), "only floors are left")
	testenv.Advance(m, idle-time.Minute)
	require.Positive(t, countKeys(t, mrdb, "*:f"), "the floors live the idle time")
	testenv.Advance(m, idle/16+time.Minute)
	require.Zero(t, countKeys(t, mrdb, "*"), "nothing is left after the idle time")
}

// countKeys counts the keys matching pattern.
func countKeys(t *testing.T, rdb *redis.Client, pattern string) int {
	t.Helper()
	keys, err := rdb.Keys(t.Context(), pattern).Result()
	require.NoError(t, err)
	return len(keys)
}

// The floor is the slot's, and in it: a name never locked before, in the
// slot of one that was, gets a token above that one's, and Inspect shows
// the floor as its LastToken before (and it is free, no owner); a name of
// another slot has a floor of its own. On a prefix of the test's own, so
// that no other name moved the floors.
func TestFloorIsShardedBySlot(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		p := testenv.Unique(t)
		c := newClient(t, b.Client, reentrant.WithPrefix(p))
		names, slot := testenv.SameSlot(p, "n", 2)
		other := testenv.NameWhere(p, "o", func(s int) bool { return s != slot })
		k0, k1, ko := scripts.KeysFor(p, names[0]), scripts.KeysFor(p, names[1]), scripts.KeysFor(p, other)
		require.Equal(t, k0.Floor, k1.Floor)
		require.NotEqual(t, k0.Floor, ko.Floor)
		require.Equal(t, slot, hashslot.Of(k0.Floor), "the floor is in the slot of its names")
		st, err := c.Inspect(t.Context(), names[1])
		require.NoError(t, err)
		require.Equal(t, reentrant.State{Name: names[1]}, st, "no floor yet")

		first := issue(t, c, names[0], 1)
		st, err = c.Inspect(t.Context(), names[1])
		require.NoError(t, err)
		require.Equal(t, reentrant.State{Name: names[1], LastToken: first}, st, "%s", fmt.Sprint(st))
		st, err = c.Inspect(t.Context(), other)
		require.NoError(t, err)
		require.Equal(t, reentrant.State{Name: other}, st, "another slot's floor")
		require.Greater(t, issue(t, c, names[1], 1), first)
	})
}

// Every key a lock's scripts touch is in the slot of its name, on every
// deployment (a Cluster needs it, and so does a proxy that routes by
// slot): the hold, the queue, the forced-unlock record and the floor with
// the default options; the hold and the counter with WithStrictTokens.
func TestKeysInTheSlotOfTheName(t *testing.T) {
	srv := redisproc.Start(t)
	rdb := srv.Client()
	for _, c := range []struct {
		desc string
		opts []reentrant.ClientOption
		want []string // the key suffixes left while a waiter queues after a forced unlock
	}{
		{"default", nil, []string{"}", "}:q", "}:u", ":f"}},
		{"strict", []reentrant.ClientOption{reentrant.WithStrictTokens()}, []string{"}", "}:q", "}:u", "}:t"}},
	} {
		t.Run(c.desc, func(t *testing.T) {
			require.NoError(t, rdb.FlushAll(t.Context()).Err())
			lc := newClient(t, rdb, c.opts...)
			name := "slot-local"
			slot := hashslot.Of(scripts.KeysFor(prefix, name).Lock)
			ctx := t.Context()
			a, err := lc.Lock(ctx, name)
			require.NoError(t, err)
			_, err = lc.ForceUnlock(ctx, name, fence.None)
			require.NoError(t, err)
			b, err := lc.Lock(ctx, name)
			require.NoError(t, err)
			got := make(chan error, 1)
			go func() {
				l, err := lc.Lock(ctx, name)
				if err == nil {
					err = l.Unlock(ctx)
				}
				got <- err
			}()
			queued(t, lc, name, 1)
			keys, err := rdb.Keys(ctx, "*").Result()
			require.NoError(t, err)
			require.Len(t, keys, len(c.want), "%q", keys)
			for _, k := range keys {
				require.Equal(t, slot, hashslot.Of(k), "%s is in the name's slot", k)
			}
			for _, suffix := range c.want {
				require.True(t, slices.ContainsFunc(keys, func(k string) bool { return strings.HasSuffix(k, suffix) }), "a key ending %q: %q", suffix, keys)
			}
			require.NoError(t, b.Unlock(ctx))
			require.NoError(t, <-got)
			require.ErrorIs(t, a.Unlock(ctx), reentrant.ErrNotHeld)
		})
	}
}
