package reentrant_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/reentrant"
)

// The uncontended path is one round trip to take a lock and one to release
// it, with a reentry and its release one each as well: no policy check,
// script load or subscription once the client is warm. Counted with a hook
// (every command or pipeline the client sends), on miniredis and on Redis,
// in both token modes.
func TestUncontendedRoundTrips(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		for _, mode := range []struct {
			name string
			opts []reentrant.ClientOption
		}{{"counter", nil}, {"time", []reentrant.ClientOption{reentrant.WithTimeTokens()}}} {
			t.Run(mode.name, func(t *testing.T) {
				rdb := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
				t.Cleanup(func() { _ = rdb.Close() })
				var mu sync.Mutex
				var trips []string
				rdb.AddHook(testenv.Hook{Sent: func(cmds []redis.Cmder, _ bool) {
					names := make([]string, len(cmds))
					for i, c := range cmds {
						names[i] = c.Name()
					}
					mu.Lock()
					trips = append(trips, strings.Join(names, " "))
					mu.Unlock()
				}})
				take := func() []string {
					mu.Lock()
					defer mu.Unlock()
					out := trips
					trips = nil
					return out
				}
				c := newClient(t, rdb, mode.opts...) // default options: renewal on, a 30 s TTL
				ctx, name := t.Context(), testenv.Unique(t)
				warm, err := c.TryLock(ctx, name+"-warm") // the policy check, the scripts' load
				require.NoError(t, err)
				require.NoError(t, warm.Unlock(ctx))
				take()

				for _, lock := range []func() (*reentrant.Lease, error){
					func() (*reentrant.Lease, error) { return c.Lock(ctx, name) },
					func() (*reentrant.Lease, error) { return c.TryLock(ctx, name) },
				} {
					l, err := lock()
					require.NoError(t, err)
					require.Equal(t, []string{"evalsha"}, take(), "a fresh acquisition")
					in, err := c.Lock(l.Context(), name)
					require.NoError(t, err)
					require.Equal(t, []string{"evalsha"}, take(), "a reentry")
					require.NoError(t, in.Unlock(ctx))
					require.Equal(t, []string{"evalsha"}, take(), "the reentry's release")
					require.NoError(t, l.Unlock(ctx))
					require.Equal(t, []string{"evalsha"}, take(), "the release")
				}
			})
		}
	})
}
