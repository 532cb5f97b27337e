//go:build unix

package reentrant_test

import (
	"context"
	"fmt"
	"regexp"
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
// options, at most 100 B and no key of its own per released name: its
// record is a field of a record hash shared by the names of its floor
// (512 floors per prefix on a standalone server, each with two record
// hashes), and every key expires. On a real server (20,000 names) the
// test measures keys and used_memory per name; on miniredis it passes the
// record and idle times: nothing is left.
func TestReleasedNameCostsUnder100Bytes(t *testing.T) {
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

	var keys, floors, recordHashes, records int
	iter := rdb.Scan(t.Context(), 0, "*", 1000).Iterator()
	for iter.Next(t.Context()) {
		key := iter.Val()
		keys++
		switch {
		case strings.HasSuffix(key, ":f"):
			floors++
		case recordHashKey.MatchString(key):
			recordHashes++
			records += int(rdb.HLen(t.Context(), key).Val())
		default:
			t.Fatalf("unexpected key %q: a released name leaves a record in a shared hash, and its floor, only", key)
		}
		ttl := rdb.PTTL(t.Context(), key).Val()
		require.Greater(t, ttl, time.Duration(0), "every key expires: %s", key)
	}
	require.NoError(t, iter.Err())
	require.Equal(t, names, records, "one record per released name")
	require.LessOrEqual(t, floors, scripts.SharedFloors)
	require.LessOrEqual(t, recordHashes, 2*scripts.SharedFloors)
	perName := float64(after-before) / names
	t.Logf("SUMMARY released-names names=%d keys=%d floors=%d record_hashes=%d used_memory_per_name=%.0fB (records and floors)",
		names, keys, floors, recordHashes, perName)
	require.Less(t, keys, names, "no key per released name")
	// A field of about 60 B in a shared hash, and a share of the floors
	// and record hashes (docs/safety.md has the breakdown).
	require.Less(t, perName, 100.0, "used_memory per released name")

	// The records go one to two record expiries after the release, the
	// floors after the idle time: only miniredis can pass them in a test.
	// Fewer names: the subject is what is left, not how much.
	m, mrdb := testenv.Mini(t)
	mc := newClient(t, mrdb, reentrant.WithCounterIdleExpiry(time.Hour))
	lockAndRelease(t, mc, "order", 500)
	require.Zero(t, countKeys(t, mrdb, prefix+":{order-*}"), "no released name keeps a key")
	require.Positive(t, countKeys(t, mrdb, "*:r*:[01]"), "their records are in the record hashes")
	testenv.Advance(m, 2*reentrant.DefaultRecordExpiry+time.Millisecond)
	require.Zero(t, countKeys(t, mrdb, "*:r*:[01]"), "no record is left after twice the record expiry")
	require.Positive(t, countKeys(t, mrdb, "*:f"), "the floors are")
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
		k0, k1 := scripts.SharedKeysFor(prefix, names[0]), scripts.SharedKeysFor(prefix, names[1])
		require.Equal(t, k0.Floor, k1.Floor)
		require.Equal(t, hashslot.Of(k0.Lock)%scripts.SharedFloors, hashslot.Of(k0.Floor),
			"on a standalone server the floor is that of the name's slot modulo SharedFloors")
		require.Equal(t, hashslot.Of(k0.Lock), hashslot.Of(scripts.KeysFor(prefix, names[0]).Floor),
			"in the slot-local layout, the floor shares the slot of the name's keys")
		first := issue(t, c, names[0], 1)
		st, err := c.Inspect(t.Context(), names[1])
		require.NoError(t, err)
		require.Equal(t, first, st.Floor, "%s", fmt.Sprint(st))
		require.Greater(t, issue(t, c, names[1], 1), first)
	})
}

// WithSlotLocalKeys keeps every key a lock touches in the slot of its name,
// as a Cluster needs and a proxy that routes by slot does: the floor and
// the record hashes too. Without it, on one server, they are shared by the
// names of 32 slots.
func TestSlotLocalKeys(t *testing.T) {
	srv := redisproc.Start(t)
	rdb := srv.Client()
	for _, c := range []struct {
		opts  []reentrant.ClientOption
		local bool
	}{{nil, false}, {[]reentrant.ClientOption{reentrant.WithSlotLocalKeys()}, true}} {
		require.NoError(t, rdb.FlushAll(t.Context()).Err())
		lc := newClient(t, rdb, c.opts...)
		// A name whose slot is above SharedFloors, so that the two
		// layouts differ.
		name := "slot-local"
		for i := 0; hashslot.Of(scripts.KeysFor(prefix, name).Lock) < scripts.SharedFloors; i++ {
			name = "slot-local-" + strconv.Itoa(i)
		}
		slot := hashslot.Of(scripts.KeysFor(prefix, name).Lock)
		l, err := lc.Lock(t.Context(), name)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
		keys, err := rdb.Keys(t.Context(), "*").Result()
		require.NoError(t, err)
		require.Len(t, keys, 2, "a floor and a record hash: %q", keys)
		for _, k := range keys {
			if c.local {
				require.Equal(t, slot, hashslot.Of(k), "slot-local: %s is in the name's slot", k)
			} else {
				require.Equal(t, slot%scripts.SharedFloors, hashslot.Of(k), "shared: %s is in the name's slot modulo SharedFloors", k)
			}
		}
		st, err := lc.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.Equal(t, l.Token(), st.LastToken, "Inspect finds the record in its layout")
		require.Equal(t, l.Token(), st.Floor)
	}
}

// recordHashKey matches the name of a record hash, P:{S}:r<record ms>:0
// or :1 (lua/lib.lua).
var recordHashKey = regexp.MustCompile(`:r[1-9][0-9]*:[01]$`)
