package reentrant_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

// A Redlock waiter tries again as soon as a release is published on the
// nodes. Its poll delay (LinearBackoff of an hour) is far longer than its
// context, so a waiter on another client can acquire only because the
// release (Unlock, or an operator's ForceUnlock) woke it. Once it holds the
// lock, no client listens on the name's wake channel on any node.
func TestRedlockWaiterWokenByRelease(t *testing.T) {
	eachRedlock(t, 3, func(t *testing.T, s redlockSet) {
		for _, how := range []string{"unlock", "force"} {
			t.Run(how, func(t *testing.T) {
				name := testenv.Unique(t)
				channel := lua.KeysFor(prefix, name).Lock + ":w"
				listeners := func() (n int64) {
					for _, rdb := range s.nodes {
						m, err := rdb.PubSubNumSub(t.Context(), channel).Result()
						require.NoError(t, err)
						n += m[channel]
					}
					return n
				}
				holder := newRedlock(t, s.nodes)
				waiter := newRedlock(t, s.nodes, reentrant.WithRetry(reentrant.LinearBackoff(time.Hour)))
				held, err := holder.Lock(t.Context(), name)
				require.NoError(t, err)

				type result struct {
					l   *reentrant.Lease
					err error
				}
				got := make(chan result, 1)
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				go func() {
					l, err := waiter.Lock(ctx, name)
					got <- result{l, err}
				}()
				require.True(t, testenv.Await(30*time.Second, func() bool { return listeners() == 3 }),
					"the waiter never listened on every node")
				select {
				case r := <-got:
					t.Fatalf("the waiter returned while the lock was held: %v", r.err)
				default:
				}
				switch how {
				case "unlock":
					require.NoError(t, held.Unlock(t.Context()))
				case "force":
					tok, err := holder.ForceUnlock(t.Context(), name)
					require.NoError(t, err)
					require.Equal(t, held.Token(), tok)
				}
				r := <-got
				require.NoError(t, r.err, "only a wake could have let the waiter acquire before its context ended")
				require.Greater(t, r.l.Token(), held.Token())
				require.True(t, testenv.Await(30*time.Second, func() bool { return listeners() == 0 }),
					"the wake channel is still listened on after the wait")
				require.NoError(t, r.l.Unlock(t.Context()))
			})
		}
	})
}
