//go:build unix

package reentrant_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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
// options, at most one key per released name (its record, until the record
// expiry) besides one floor per hash slot used (16,384 at most, whatever
// the number of names), and every key it leaves expires. On a real server
// (20,000 names) the test measures keys and used_memory per name; on
// miniredis it passes the record and idle times: nothing is left.
func TestReleasedNamesCostOneExpiringKey(t *testing.T) {
	t.Parallel() // see TestMain
	const names = 20_000
	srv := redisproc.Start(t)
	rdb := srv.Client()
	c := newClient(t, rdb)
	// Warm the client (scripts loaded, connections open) on names of
	// another prefix... of the same client: one name, deleted after.
	lockAndRelease(t, c, "warm", 1)
	require.NoError(t, rdb.FlushAll(t.Context()).Err())
	before := usedMemory(t, rdb)
	lockAndRelease(t, c, "order", names)
	after := usedMemory(t, rdb)

	var records, floors int
	iter := rdb.Scan(t.Context(), 0, "*", 1000).Iterator()
	for iter.Next(t.Context()) {
		key := iter.Val()
		switch {
		case strings.HasPrefix(key, prefix+":{order-") && strings.HasSuffix(key, "}"):
			records++
		case strings.HasSuffix(key, ":f"):
			floors++
		default:
			t.Fatalf("unexpected key %q: a released name leaves its record and its slot's floor only", key)
		}
		ttl := rdb.PTTL(t.Context(), key).Val()
		require.Greater(t, ttl, time.Duration(0), "every key expires: %s", key)
	}
	require.NoError(t, iter.Err())
	require.Equal(t, names, records, "one record per released name")
	require.LessOrEqual(t, floors, hashslot.Slots)
	perName := float64(after-before) / names
	t.Logf("SUMMARY released-names names=%d records=%d floors=%d used_memory_per_name=%.0fB (records and floors)", names, records, floors, perName)
	// One hash of three fields with an expiry, and a share of the floors:
	// about 200 B on Redis 7 (docs/safety.md has the breakdown). The bound
	// is the size of two such keys: a second key per name fails it.
	require.Less(t, perName, 300.0, "used_memory per released name")

	// The records go after the record expiry, the floors after the idle
	// time: only miniredis can pass them in a test. Fewer names: the
	// subject is what is left, not how much.
	m, mrdb := testenv.Mini(t)
	mc := newClient(t, mrdb, reentrant.WithCounterIdleExpiry(time.Hour))
	lockAndRelease(t, mc, "order", 500)
	require.Equal(t, 500, countKeys(t, mrdb, prefix+":{order-*}"))
	// A release leaves the record the expiry its take gave it: the record
	// expiry after the lease's end.
	testenv.Advance(m, reentrant.DefaultTTL+reentrant.DefaultRecordExpiry+time.Millisecond)
	require.Zero(t, countKeys(t, mrdb, prefix+":{order-*}"), "no record is left after the lease and the record expiry")
	require.Positive(t, countKeys(t, mrdb, "*:f"), "the slots' floors are")
	testenv.Advance(m, time.Hour)
	require.Zero(t, countKeys(t, mrdb, "*"), "nothing is left after the idle time")
}

// countKeys counts the keys matching pattern.
func countKeys(t *testing.T, rdb *redis.Client, pattern string) int {
	t.Helper()
	keys, err := rdb.Keys(t.Context(), pattern).Result()
	require.NoError(t, err)
	return len(keys)
}

// The floor is the slot's: a name never locked before, in the slot of one
// that was, gets a token above that one's, and Inspect shows the floor.
func TestFloorIsShardedBySlot(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := newClient(t, b.Client)
		names, _ := testenv.SameSlot(prefix, testenv.Unique(t), 2)
		k0, k1 := scripts.KeysFor(prefix, names[0]), scripts.KeysFor(prefix, names[1])
		require.Equal(t, k0.Floor, k1.Floor)
		require.Equal(t, hashslot.Of(k0.Lock), hashslot.Of(k0.Floor), "the floor shares the slot of the name's keys")
		first := issue(t, c, names[0], 1)
		st, err := c.Inspect(t.Context(), names[1])
		require.NoError(t, err)
		require.Equal(t, first, st.Floor, "%s", fmt.Sprint(st))
		require.Greater(t, issue(t, c, names[1], 1), first)
	})
}
