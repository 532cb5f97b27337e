package reentrant_test

import (
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/hashslot"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/reentrant"
)

// An uncontended Lock+Unlock costs the server exactly the commands the
// scripts run (lua/acquire.lua, lua/release.lua and lib.lua's issue and
// grant): counted with INFO commandstats on a private redis-server,
// script-internal commands included, over pairs on a name locked again
// (its slot's floor known to the library, the common case) and on fresh
// names, each in a slot of its own. A path that gains a command fails it.
func TestUncontendedPairCommands(t *testing.T) {
	t.Parallel() // see TestMain
	srv := redisproc.Start(t)
	rdb := srv.Client()
	const pairs = 20
	for _, c := range []struct {
		desc string
		opts []reentrant.ClientOption
		want map[string]int // per pair, on a name locked again
		// fresh is what a fresh name adds per pair.
		fresh map[string]int
	}{
		// acquire: EXISTS (the hold, the queue, no strict counter), TIME,
		// SET … KEEPTTL GET (the floor, below the clock), HSET and PEXPIRE
		// (the hold and its lease); release: HGETALL, DEL. A fresh slot's
		// floor is new to the library: its expiry is set, a PEXPIRE more.
		{"default", nil, map[string]int{"fcall": 2, "exists": 1, "time": 1, "set": 1, "hset": 1, "pexpire": 1, "hgetall": 1, "del": 1},
			map[string]int{"pexpire": 1}},
		// acquire: EXISTS (the hold, the queue, no floor in the slot),
		// INCR (the counter), HSET, PEXPIRE; release: HGETALL, DEL. A
		// fresh name costs the same.
		{"strict", []reentrant.ClientOption{reentrant.WithStrictTokens()},
			map[string]int{"fcall": 2, "exists": 1, "incr": 1, "hset": 1, "pexpire": 1, "hgetall": 1, "del": 1},
			nil},
	} {
		t.Run(c.desc, func(t *testing.T) {
			// A prefix per mode: one prefix, one token mode.
			p := prefix + "-" + c.desc
			lc := newClient(t, rdb, append(c.opts, reentrant.WithPrefix(p))...)
			lockAndRelease(t, lc, "warm", 1) // the library loaded, connections open
			used := map[int]bool{hashslot.Of(scripts.KeysFor(p, "warm-0").Lock): true}
			for _, fresh := range []bool{true, false} {
				var names []string
				if fresh {
					// Names of slots no name locked before.
					for i := 0; len(names) < pairs; i++ {
						name := fmt.Sprintf("fresh-%d", i)
						if slot := hashslot.Of(scripts.KeysFor(p, name).Lock); !used[slot] {
							used[slot] = true
							names = append(names, name)
						}
					}
				} else {
					l, err := lc.Lock(t.Context(), "again") // its slot's floor is known
					require.NoError(t, err)
					require.NoError(t, l.Unlock(t.Context()))
					for range pairs {
						names = append(names, "again")
					}
				}
				require.NoError(t, rdb.ConfigResetStat(t.Context()).Err())
				for _, name := range names {
					l, err := lc.Lock(t.Context(), name)
					require.NoError(t, err)
					require.NoError(t, l.Unlock(t.Context()))
				}
				got := commandCounts(t, rdb)
				want := maps.Clone(c.want)
				if fresh {
					for cmd, n := range c.fresh {
						want[cmd] += n
					}
				}
				for cmd := range want {
					want[cmd] *= pairs
				}
				require.Equal(t, want, got, "%s, fresh names %v: server commands of %d uncontended Lock+Unlock pairs", c.desc, fresh, pairs)
			}
		})
	}
}

var cmdstat = regexp.MustCompile(`cmdstat_([a-z|]+):calls=(\d+)`)

// commandCounts reads INFO commandstats: calls per command, without the
// INFO and CONFIG RESETSTAT that measure.
func commandCounts(t *testing.T, rdb *redis.Client) map[string]int {
	t.Helper()
	info, err := rdb.Info(t.Context(), "commandstats").Result()
	require.NoError(t, err)
	got := map[string]int{}
	for _, m := range cmdstat.FindAllStringSubmatch(info, -1) {
		if m[1] == "info" || m[1] == "config|resetstat" {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		got[m[1]] = n
	}
	return got
}
