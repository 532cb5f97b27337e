package lua_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

// A server before Redis 7.0 has no PEXPIREAT … NX: putRecord's call
// returns an error there, and the record hash gets its expiry from PTTL
// and a plain PEXPIREAT instead, once, as NX would. Only 7.0 runs here, so
// the test runs release.lua with that call answered as an older server
// answers it (an error reply: an option it does not know) and checks the
// rule: the first record of a hash gives it the expiry that ends the
// generation after the one it was written in, and a later record in the
// same hash leaves that expiry as it is.
func TestRecordExpiryWithoutPexpireatNX(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := t.Context()
	src := scripts.Source("release")
	const nx = "redis.pcall('PEXPIREAT', bucket, at, 'NX')"
	require.Contains(t, src, nx)
	restore := scripts.Swap("release", strings.Replace(src, nx, "redis.pcall('PEXPIREAT', bucket, at, 'NX', 'NOT-BEFORE-7.0')", 1))
	t.Cleanup(restore)

	tokens := scripts.Tokens{Time: true, Idle: time.Hour, Record: time.Minute}
	w := tokens.Record.Milliseconds()
	stow := func(prefix, name string) (expireAt int64, bucket string) {
		t.Helper()
		k := scripts.KeysFor(prefix, name)
		a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o1", TTL: time.Minute, Level: "l1", Tokens: tokens})
		require.NoError(t, err)
		require.True(t, a.OK)
		n, err := scripts.Release(ctx, rdb, k, "o1", a.Token, "l1", tokens)
		require.NoError(t, err)
		require.Zero(t, n)
		for _, b := range k.Records(tokens) {
			if rdb.HExists(ctx, b, k.RecordField()).Val() {
				at, err := rdb.PExpireTime(ctx, b).Result()
				require.NoError(t, err)
				return at.Milliseconds(), b
			}
		}
		t.Fatalf("%s: no record after its release", name)
		return 0, ""
	}
	for attempt := 0; ; attempt++ {
		// A prefix of its own, and two names of one slot (one floor, one
		// pair of record hashes): the first record opens a new hash, so it
		// takes the fallback's path, not an expiry another record set.
		prefix := "rfnx" + strconv.FormatInt(time.Now().UnixNano(), 36)
		names, _ := testenv.SameSlot(prefix, "n", 2)
		before := time.Now().UnixMilli()
		at, bucket := stow(prefix, names[0])
		require.Positive(t, at, "the first record's hash has an expiry")
		require.Equal(t, w-1, at%w, "it ends a generation: (g+2)·W − 1")
		require.Greater(t, at, before+w-1000, "at least a record time from the write (a second of skew allowed)")
		require.Less(t, at, before+2*w+1000, "at most two")
		// Moved by hand, so that a second record that set the expiry
		// again, to the same generation's end, would show.
		moved := at - 5000
		require.NoError(t, rdb.PExpireAt(ctx, bucket, time.UnixMilli(moved)).Err())
		at2, bucket2 := stow(prefix, names[1])
		if bucket2 != bucket && attempt < 3 {
			// A generation ended between the two releases: the second
			// record opened the other hash. Again, in the new generation.
			continue
		}
		require.Equal(t, bucket, bucket2, "two records a few ms apart, four times across a generation's end")
		require.Equal(t, moved, at2, "a later record leaves the hash's expiry as it is")
		return
	}
}
