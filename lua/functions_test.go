package lua_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

// cycle takes and releases a free lock through the wrappers.
func cycle(t *testing.T, rdb *redis.Client, k scripts.Keys, level string) {
	t.Helper()
	a := take(t, rdb, k, "o", level, strict)
	require.Equal(t, scripts.Released{}, release(t, rdb, k, "o", a.Token, level, strict))
}

// calls returns how many times the server ran cmd (INFO commandstats).
func calls(t *testing.T, rdb *redis.Client, cmd string) int {
	t.Helper()
	m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(rdb.Info(t.Context(), "commandstats").Val())
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// On Redis 7 the scripts run as one library of Functions, loaded by the
// first call that finds it missing: on a new server, after FUNCTION FLUSH,
// after a restart that lost it. SCRIPT FLUSH does not touch it.
func TestFunctionsLoadedOnDemand(t *testing.T) {
	srv := redisproc.Start(t)
	rdb := srv.Client()
	k := keys(t)
	require.Empty(t, testenv.Libraries(t, rdb))
	cycle(t, rdb, k, "l1")
	require.Equal(t, []string{scripts.LibraryName()}, testenv.Libraries(t, rdb), "loaded by the first call")
	require.Equal(t, 2, calls(t, rdb, "fcall")+calls(t, rdb, "fcall_ro")-1, "the first call was sent again after the load, the release once")
	require.Zero(t, calls(t, rdb, "evalsha")+calls(t, rdb, "eval"))

	require.NoError(t, rdb.ScriptFlush(t.Context()).Err())
	cycle(t, rdb, k, "l2")
	require.NoError(t, rdb.FunctionFlush(t.Context()).Err())
	cycle(t, rdb, k, "l3")
	require.Equal(t, []string{scripts.LibraryName()}, testenv.Libraries(t, rdb), "reloaded after FUNCTION FLUSH")

	srv.Crash(0) // no persistence: the library is gone with the data
	require.Empty(t, testenv.Libraries(t, rdb))
	cycle(t, rdb, k, "l4")
	require.Equal(t, []string{scripts.LibraryName()}, testenv.Libraries(t, rdb), "reloaded after a restart")
	require.EqualValues(t, 1, inspect(t, rdb, k).Counter, "the restart lost the counter too (no persistence)")
	require.Zero(t, calls(t, rdb, "evalsha")+calls(t, rdb, "eval"), "no EVALSHA on a server with Functions")
}

// A server that cannot load the library (FUNCTION renamed away, as an
// operator may; or FCALL too) runs the scripts with EVALSHA, and the client
// remembers it: one FCALL is tried, then none.
func TestFunctionsFallBackToEvalSha(t *testing.T) {
	for _, renamed := range [][]string{{"FUNCTION"}, {"FUNCTION", "FCALL", "FCALL_RO"}} {
		t.Run(strings.Join(renamed, "+"), func(t *testing.T) {
			var args []string
			for _, c := range renamed {
				args = append(args, "--rename-command", c, "") // renamed to nothing: gone
			}
			srv := redisproc.Start(t, redisproc.WithArgs(args...))
			rdb := srv.Client()
			k := keys(t)
			for i := range 5 {
				cycle(t, rdb, k, "l"+strconv.Itoa(i))
			}
			require.EqualValues(t, 5, inspect(t, rdb, k).Counter)
			require.Equal(t, 11, calls(t, rdb, "evalsha"), "every call as EVALSHA (and EVAL the first of each script)")
			require.LessOrEqual(t, calls(t, rdb, "fcall"), 1, "FCALL tried once, then remembered as missing")
		})
	}
}

// Two versions of the SDK side by side (a rolling deploy): each loads its
// own library, named by its version, and never replaces the other's, and
// both work on the same locks.
func TestTwoLibraryVersionsCoexist(t *testing.T) {
	srv := redisproc.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	const other = "redfence_0123456789ab" // another build's library
	src := strings.ReplaceAll(scripts.LibrarySource(), scripts.LibraryName(), other)
	require.NoError(t, rdb.FunctionLoad(ctx, src).Err())

	k := keys(t)
	// The other version takes the lock; this one releases it.
	acquireKeys := []string{k.Lock, k.Queue, k.Counter, k.Floor}
	v, err := rdb.FCall(ctx, other+"_acquire", acquireKeys, "o", 60000, "l1", "0").Result()
	require.NoError(t, err)
	require.Equal(t, "1", fmt.Sprint(v), "a fresh take's reply: its token (an integer or a decimal string)")
	require.Equal(t, scripts.Released{}, release(t, rdb, k, "o", 1, "l1", strict))
	require.ElementsMatch(t, []string{other, scripts.LibraryName()}, testenv.Libraries(t, rdb), "both libraries, neither replaced")
	v, err = rdb.FCall(ctx, other+"_acquire", acquireKeys, "o", 60000, "l2", "0").Result()
	require.NoError(t, err)
	require.Equal(t, "2", fmt.Sprint(v), "the other version goes on from this one's counter")
}
