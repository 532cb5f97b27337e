// Package mutant plants deliberately broken lock scripts for tests that must
// show their checker catches a bug: each swaps a script for the rest of the
// test and restores it when the test ends. Each swap fails the test when
// the text it replaces is no longer in the script (lua/*.lua changed), so a
// mutant is never silently the correct script.
package mutant

import (
	"strings"
	"testing"

	"github.com/redfence/redfence/internal/scripts"
)

// firstLevel is Lua that sets level (and granted) to the first l:<id> field
// of the hold at KEYS[1], when it has one: the level a broken release takes
// in place of the one it was asked to release.
const firstLevel = `    for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
      if string.sub(f, 1, 2) == 'l:' then
        level, granted = f, '1'
        break
      end
    end
`

// ReplayedReleaseTakesALevel brings back the bug of the count-based release
// script: a release whose level is already gone (a retry, or a replay)
// takes another level of the hold instead of changing nothing, and frees the
// lock when that was the last one.
func ReplayedReleaseTakesALevel(t testing.TB) {
	t.Helper()
	swap(t, "release",
		"  if not granted then\n    return depth\n  elseif depth > 1 then\n",
		"  if not granted then\n"+firstLevel+"  end\n  if depth > 1 then\n")
}

// ReleaseWithoutOwnerCheck lets anyone release a held lock: the release
// script skips its owner and token check, and takes a level, named or not.
func ReleaseWithoutOwnerCheck(t testing.TB) {
	t.Helper()
	swap(t, "release",
		"elseif o == ARGV[1] and ts == ARGV[2] then\n  if not granted then\n",
		"elseif o then\n  if not granted then\n"+firstLevel+"  end\n  if not granted then\n")
}

// HandoffToNewestWaiter makes every script that hands a freed lock on
// (nextWaiter in lua/queue.lua: acquire, release, abandon, force, multi)
// hand it to the waiter that queued last instead of the one that queued
// first: the queue is read newest first, and the entries read are taken
// out from that end.
func HandoffToNewestWaiter(t testing.TB) {
	t.Helper()
	for _, name := range []string{"acquire", "release", "abandon", "force", "multi"} {
		swapAll(t, name, map[string]string{
			"callOn('ZRANGE', queue, from, from + 15)":       "callOn('ZREVRANGE', queue, from, from + 15)",
			"redis.call('ZREMRANGEBYRANK', queue, 0, n - 1)": "redis.call('ZREMRANGEBYRANK', queue, -n, -1)",
		})
	}
}

// swap replaces from with to in the named script for the rest of the test.
func swap(t testing.TB, name, from, to string) {
	t.Helper()
	swapAll(t, name, map[string]string{from: to})
}

// swapAll makes every replacement (from: to, the first occurrence of each)
// in the named script, swapped in once for the rest of the test.
func swapAll(t testing.TB, name string, repl map[string]string) {
	t.Helper()
	src := scripts.Source(name)
	broken := src
	for from, to := range repl {
		next := strings.Replace(broken, from, to, 1)
		if next == broken {
			t.Fatalf("mutant: %q is not in %s.lua any more", from, name)
		}
		broken = next
	}
	t.Cleanup(scripts.Swap(name, broken))
}

// SemaphoreOverAdmits makes a semaphore admit a permit however many are
// held (admits in lua/shared.lua, in sacquire and srelease): more live
// holders than permits, the next on a slot out of range.
func SemaphoreOverAdmits(t testing.TB) {
	t.Helper()
	for _, name := range []string{"sacquire", "srelease"} {
		swap(t, name, "  return st.n < st.count\n", "  return true\n")
	}
}

// ReaderBesideWriter makes a read-write lock admit a reader while a writer
// holds it (admits in lua/shared.lua, in sacquire and srelease).
func ReaderBesideWriter(t testing.TB) {
	t.Helper()
	for _, name := range []string{"sacquire", "srelease"} {
		swap(t, name, "  elseif k == 'r' then\n    return not st.writer\n", "  elseif k == 'r' then\n    return true\n")
	}
}
