package lua_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

// A hold kept as a string and turned into its hash in its key's last
// millisecond keeps an expiry: the hash must not outlive the string it
// stands for. Redis expires no key while a script runs, and on 7.0 PTTL
// counts from the clock, not from the script's start, so a script that
// spins past the key's expiry sees it still there with PTTL 0: the moment
// a release whose script starts in the key's last millisecond meets by
// chance. The script is release.lua run as EVAL, with a setup before its
// body that writes the hold (its value in the source) with a 2 ms expiry
// and spins 5 ms; the release
// names another token, so the general path reads the hold, turns it into
// its hash and answers -1 without writing anything else.
func TestHoldInItsLastMillisecondKeepsAnExpiry(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := t.Context()
	if v := serverVersion(t, rdb); !strings.HasPrefix(v, "7.0.") {
		// Later servers count PTTL from the script's start too: the setup
		// cannot reach PTTL 0 there.
		testenv.Missing(t, "redis "+v, "CI runs 7.0 and must run this test: give it another way to reach PTTL 0", "the setup needs 7.0's PTTL inside a script")
	}
	src := scripts.Source("release")
	const body = "local quick, read = quickRelease("
	i := strings.Index(src, body)
	require.Positive(t, i, "release.lua's body starts with its quick path")
	const setup = `
redis.call('SET', KEYS[1], HOLD, 'PX', 2)
local function us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local start = us()
repeat until us() >= start + 5000
local left = redis.call('PTTL', KEYS[1])
if left ~= 0 then
  return redis.error_reply('SETUP PTTL ' .. left)
end
`
	const mode = "3600000/60000" // time tokens: an hour's idle expiry, a minute's record time
	for _, c := range []struct {
		what string
		x    time.Duration // the lease's end from now
	}{
		{"the lease ended", -time.Minute},
		{"the lease running (an expiry shortened by hand)", time.Minute},
	} {
		t.Run(c.what, func(t *testing.T) {
			k := keys(t)
			now := time.Now()
			tok := now.UnixMicro()
			hold := strconv.FormatInt(tok, 10) + " " + strconv.FormatInt(now.Add(c.x).UnixMilli(), 10) + " " +
				strconv.FormatInt(tok, 10) + " l1 o1"
			release := redis.NewScript(src[:i] + strings.Replace(setup, "HOLD", strconv.Quote(hold), 1) + src[i:])
			n, err := release.Run(ctx, rdb, []string{k.Lock, k.Queue, k.Floor},
				"o1", strconv.FormatInt(tok+1, 10), "l1", mode).Int64()
			require.NoError(t, err)
			require.Equal(t, int64(-1), n, "another token's release")
			// Whatever the script left must go: a key without an expiry
			// would stay forever.
			ttl, err := rdb.PTTL(ctx, k.Lock).Result()
			require.NoError(t, err)
			require.NotEqual(t, time.Duration(-1), ttl, "the hash kept no expiry")
			require.True(t, testenv.Await(10*time.Second, func() bool {
				return rdb.Exists(ctx, k.Lock).Val() == 0
			}), "the lock key outlived its expiry")
		})
	}
}

// serverVersion is the server's redis_version.
func serverVersion(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	info, err := rdb.Info(t.Context(), "server").Result()
	require.NoError(t, err)
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	t.Fatal("INFO server names no redis_version")
	return ""
}
