// Package mutant plants deliberately broken lock scripts for tests that must
// show their checker catches a bug: each swaps a script for the rest of the
// test and restores it when the test ends.
package mutant

import (
	"strings"
	"testing"

	"github.com/redfence/redfence/internal/scripts"
)

// ReplayedReleaseTakesALevel brings back the bug of the count-based release
// script: a release whose level is already gone (a retry, or a replay) takes
// another level of the hold instead of changing nothing.
func ReplayedReleaseTakesALevel(t testing.TB) {
	t.Helper()
	swapRelease(t, "  if not h.granted then\n    return h.depth\n  end\n",
		`  if not h.granted then
    if h.depth > 1 then
      redis.call('HDEL', KEYS[1], 'l:' .. h.levels[1])
      return h.depth - 1
    end
  end
`)
}

// ReleaseWithoutOwnerCheck lets anyone release a held lock: the release
// script skips its owner and token check, and takes a level, named or not.
func ReleaseWithoutOwnerCheck(t testing.TB) {
	t.Helper()
	swapRelease(t, "if h.x and h.ts == ARGV[2] then\n  if h.o ~= ARGV[1] then\n    return -1\n  end\n",
		"if h.x then\n  if not h.granted then\n    level, h.granted = 'l:' .. h.levels[1], 1\n  end\n")
}

// HandoffToNewestWaiter makes every script hand a freed lock to the waiter
// that queued last instead of the one that queued first: the general
// path's handoff and release's quick one (quickHandOn).
func HandoffToNewestWaiter(t testing.TB) {
	t.Helper()
	for _, name := range []string{"acquire", "release", "abandon"} {
		swap(t, name, "callOn('ZPOPMIN', queue)", "callOn('ZPOPMAX', queue)")
	}
	swap(t, "release", "redis.pcall('ZPOPMIN', queue)", "redis.pcall('ZPOPMAX', queue)")
}

func swapRelease(t testing.TB, from, to string) {
	t.Helper()
	swap(t, "release", from, to)
}

// swap replaces from with to in the named script for the rest of the test.
func swap(t testing.TB, name, from, to string) {
	t.Helper()
	src := scripts.Source(name)
	broken := strings.Replace(src, from, to, 1)
	if broken == src {
		t.Fatalf("mutant: %q is not in %s.lua any more", from, name)
	}
	t.Cleanup(scripts.Swap(name, broken))
}
