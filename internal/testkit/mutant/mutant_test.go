package mutant_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/mutant"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

// Each mutant is planted in the scripts as they are (its swap fails the
// test when the text it replaces is gone), and does what its name says,
// where the real script does not: the checker tests that hunt it (the
// root package's property tests, jepsen's linearizability tests) then
// catch the bug it names, not a script that fails to run.
func TestMutantsMeanWhatTheySay(t *testing.T) {
	ctx := context.Background()
	req := func(owner, level string, w *scripts.Waiter) *scripts.Request {
		return &scripts.Request{Owner: owner, Level: level, TTL: time.Minute, Waiter: w}
	}
	cases := []struct {
		name  string
		plant func(testing.TB)
		// run sets a lock up on k and returns what the script under test
		// answers or leaves, as text, to compare with and without the
		// mutant.
		run func(t *testing.T, m *testenv.Backend, k scripts.Keys) string
		// real and broken are what run returns without and with it.
		real, broken string
	}{{
		// A retried release of a level already gone: the real script
		// answers the depth left and changes nothing; the mutant takes
		// the other level, which frees the lock.
		name:  "ReplayedReleaseTakesALevel",
		plant: mutant.ReplayedReleaseTakesALevel,
		run: func(t *testing.T, b *testenv.Backend, k scripts.Keys) string {
			a, err := scripts.Acquire(ctx, b.Client, k, req("o", "a", nil))
			require.NoError(t, err)
			_, err = scripts.Acquire(ctx, b.Client, k, req("o", "b", nil))
			require.NoError(t, err)
			r, err := scripts.Release(ctx, b.Client, k, "o", a.Token, "a", scripts.Tokens{})
			require.NoError(t, err)
			require.Equal(t, int64(1), r.Depth)
			r, err = scripts.Release(ctx, b.Client, k, "o", a.Token, "a", scripts.Tokens{})
			require.NoError(t, err)
			st, err := scripts.Inspect(ctx, b.Client, k)
			require.NoError(t, err)
			return releasedText(r) + " holder " + st.Owner
		},
		real:   "depth 1 free=false forced=false holder o",
		broken: "depth 0 free=false forced=false holder ",
	}, {
		// Another owner's release with a wrong token: refused (-1), or
		// by the mutant applied to the holder's level.
		name:  "ReleaseWithoutOwnerCheck",
		plant: mutant.ReleaseWithoutOwnerCheck,
		run: func(t *testing.T, b *testenv.Backend, k scripts.Keys) string {
			a, err := scripts.Acquire(ctx, b.Client, k, req("o", "a", nil))
			require.NoError(t, err)
			r, err := scripts.Release(ctx, b.Client, k, "x", a.Token+1, "z", scripts.Tokens{})
			require.NoError(t, err)
			st, err := scripts.Inspect(ctx, b.Client, k)
			require.NoError(t, err)
			return releasedText(r) + " holder " + st.Owner
		},
		real:   "depth -1 free=false forced=false holder o",
		broken: "depth 0 free=false forced=false holder ",
	}, {
		// Two waiters queued one after the other: the release hands the
		// lock to the first, or by the mutant to the second.
		name:  "HandoffToNewestWaiter",
		plant: mutant.HandoffToNewestWaiter,
		run: func(t *testing.T, b *testenv.Backend, k scripts.Keys) string {
			w := &scripts.Waiter{Channel: "nobody", Claim: time.Minute, Queue: time.Minute}
			a, err := scripts.Acquire(ctx, b.Client, k, req("o", "a", nil))
			require.NoError(t, err)
			for _, o := range []string{"first", "second"} {
				testenv.Advance(b.Mini, time.Millisecond) // the queue's order is the server's clock
				q, err := scripts.Acquire(ctx, b.Client, k, req(o, o, w))
				require.NoError(t, err)
				require.False(t, q.OK)
			}
			_, err = scripts.Release(ctx, b.Client, k, "o", a.Token, "a", scripts.Tokens{})
			require.NoError(t, err)
			st, err := scripts.Inspect(ctx, b.Client, k)
			require.NoError(t, err)
			return "holder " + st.Owner
		},
		real:   "holder first",
		broken: "holder second",
	}, {
		// A semaphore of one permit, asked by two owners: the second is
		// refused, or by the mutant admitted, on slot 1.
		name:  "SemaphoreOverAdmits",
		plant: mutant.SemaphoreOverAdmits,
		run: func(t *testing.T, b *testenv.Backend, _ scripts.Keys) string {
			var out []string
			for _, o := range []string{"a", "b"} {
				r := req(o, o, nil)
				r.Meta = "s1"
				a, err := scripts.Acquire(ctx, b.Client, scripts.SharedKeys("mutant", "n", 's', o), r)
				require.NoError(t, err)
				out = append(out, fmt.Sprintf("%s ok=%v slot=%d", o, a.OK, a.Slot))
			}
			return strings.Join(out, ", ")
		},
		real:   "a ok=true slot=0, b ok=false slot=0",
		broken: "a ok=true slot=0, b ok=true slot=1",
	}, {
		// A reader asks while a writer holds the lock: refused, or by
		// the mutant admitted.
		name:  "ReaderBesideWriter",
		plant: mutant.ReaderBesideWriter,
		run: func(t *testing.T, b *testenv.Backend, _ scripts.Keys) string {
			var out []string
			for _, o := range []string{"w", "r"} {
				r := req(o, o, nil)
				r.Meta = o
				a, err := scripts.Acquire(ctx, b.Client, scripts.SharedKeys("mutant", "n", o[0], o), r)
				require.NoError(t, err)
				out = append(out, fmt.Sprintf("%s ok=%v", o, a.OK))
			}
			return strings.Join(out, ", ")
		},
		real:   "w ok=true, r ok=false",
		broken: "w ok=true, r ok=true",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			outcome := func(t *testing.T) string {
				m, rdb := testenv.Mini(t)
				b := &testenv.Backend{Name: "miniredis", Client: rdb, Mini: m}
				return c.run(t, b, scripts.KeysFor("mutant", "n"))
			}
			t.Run("real", func(t *testing.T) { require.Equal(t, c.real, outcome(t)) })
			t.Run("planted", func(t *testing.T) {
				c.plant(t)
				require.Equal(t, c.broken, outcome(t))
			})
		})
	}
}

func releasedText(r scripts.Released) string {
	return fmt.Sprintf("depth %d free=%v forced=%v", r.Depth, r.Free, r.Forced != nil)
}
