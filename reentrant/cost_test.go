package reentrant_test

import (
	"maps"
	"regexp"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/reentrant"
)

// An uncontended Lock+Unlock costs the server exactly the commands
// docs/design.md states (the table "Costs, in server commands per call"
// and the line under it): counted with INFO commandstats on a private
// redis-server, script-internal commands included, over pairs on a name
// never locked and on a name locked again (its record lives, the common
// case of W1). A path that gains a command, or a quick path that stops
// being taken (the general path reads and writes more), fails it.
func TestUncontendedPairCommands(t *testing.T) {
	t.Parallel() // see TestMain
	srv := redisproc.Start(t)
	rdb := srv.Client()
	const pairs = 20
	for _, c := range []struct {
		desc string
		opts []reentrant.ClientOption
		want map[string]int // per pair
	}{
		// acquire: GET (no key: stowed), TIME, SET … PX … GET (the
		// floor), HGET (the record, in the current generation's record
		// hash) and HSET (marked taken), SET … PX (the hold, a string);
		// release: GET, TIME, EXISTS (no strict counter), HSET (the
		// record, over the mark), DEL. A fresh name, below, has no
		// record: two HGETs, no mark, and its record is a new field:
		// PEXPIREAT … NX.
		{"default", nil, map[string]int{"fcall": 2, "get": 2, "time": 2, "set": 2, "hget": 1, "hset": 2, "exists": 1, "del": 1}},
		// acquire: HGETALL (no hash: compacted), GET (the counter's
		// record), TIME, HSET, SET; release: HGETALL, TIME, SET … GET,
		// DEL.
		{"strict", []reentrant.ClientOption{reentrant.WithStrictTokens()},
			map[string]int{"fcall": 2, "hgetall": 2, "time": 2, "get": 1, "set": 2, "hset": 1, "del": 1}},
	} {
		t.Run(c.desc, func(t *testing.T) {
			lc := newClient(t, rdb, c.opts...)
			lockAndRelease(t, lc, "warm-"+c.desc, 1) // the library loaded, connections open
			for _, fresh := range []bool{true, false} {
				base := "again-" + c.desc
				if fresh {
					base = "fresh-" + c.desc
				} else {
					l, err := lc.Lock(t.Context(), base) // its record lives
					require.NoError(t, err)
					require.NoError(t, l.Unlock(t.Context()))
				}
				require.NoError(t, rdb.ConfigResetStat(t.Context()).Err())
				for i := range pairs {
					name := base
					if fresh {
						name += "-" + strconv.Itoa(i)
					}
					l, err := lc.Lock(t.Context(), name)
					require.NoError(t, err)
					require.NoError(t, l.Unlock(t.Context()))
				}
				got := commandCounts(t, rdb)
				want := maps.Clone(c.want)
				for cmd := range want {
					want[cmd] *= pairs
				}
				if c.desc == "default" {
					switch {
					case fresh:
						want["hget"], want["hset"], want["pexpireat"] = 2*pairs, pairs, pairs
					case got["pexpireat"] == 1:
						// The record generation changed between two
						// pairs (once a minute): the take found the
						// name's record in the other record hash (a
						// second HGET), and the release wrote it to the
						// current one, a new field there.
						want["hget"], want["pexpireat"] = pairs+1, 1
					}
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
