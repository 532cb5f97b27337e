// Deliberately broken variants of the store and the lock, each of which a
// checker must reject: the passing checks mean something only if these fail.

package jepsen_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/history"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
)

// linStaleStore is a deliberately broken store: a write its inner store
// refuses as stale is written anyway, under the highest token, and
// reported accepted.
type linStaleStore struct {
	storage.Store
	forged atomic.Int64 // stale writes let through
}

var _ storage.Store = (*linStaleStore)(nil)

// Put implements storage.Store, brokenly.
func (s *linStaleStore) Put(ctx context.Context, key string, value []byte, t fence.Token) error {
	err := s.Store.Put(ctx, key, value, t)
	var stale *fence.StaleError
	if !errors.As(err, &stale) {
		return err
	}
	s.forged.Add(1)
	return s.Store.Put(ctx, key, value, stale.Highest)
}

// linOwnerBlindRelease is a deliberately broken release script: it checks
// the token but not the owner. Tokens are small sequential integers anyone
// can read, so it lets any client release anyone's lock.
var linOwnerBlindRelease = redis.NewScript(`
local h = redis.call('HMGET', KEYS[1], 't', 'x')
if h[1] ~= ARGV[1] or not h[2] then return -1 end
local n, gone = 0, nil
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(f, 1, 2) == 'l:' then
    n = n + 1
    gone = gone or f
  end
end
redis.call('HDEL', KEYS[1], gone)
if n > 1 then return n - 1 end
redis.call('HDEL', KEYS[1], 'x')
return 0`)

// TestLinearizableCheckersCatchBrokenVariants runs each checker on a
// deliberately broken system and asserts that it reports a violation, so
// the passing checks above mean something.
func TestLinearizableCheckersCatchBrokenVariants(t *testing.T) {
	workers, ops := linScale()
	t.Run("store accepting stale tokens", func(t *testing.T) {
		s := &linStaleStore{Store: memory.New()}
		rec := linRunStore(t, s, workers, ops, 5*time.Second)
		r := history.NotLinearizable(t, history.RegisterModel(), rec.Operations(), linCheckTimeout)
		t.Logf("%v, %d stale writes let through; check %v", rec.Counts(), s.forged.Load(), r)
	})
	t.Run("release without owner check", func(t *testing.T) {
		// The victim's own Unlock then finds its ownership ended, which
		// the release script takes for a repeat and answers as done: the
		// theft shows when another owner takes the lock before the victim
		// lets go. A run may miss that, so up to ten runs get the chance,
		// and the last one must be called illegal.
		for i := range 10 {
			_, c := testenv.Mini(t)
			w := linLockWorld{rdb: c, store: memory.New(), names: linLockNames(t), opTimeout: 5 * time.Second,
				release: func(ctx context.Context, k lua.Keys, _ string, tok fence.Token) (int64, error) {
					return linOwnerBlindRelease.Run(ctx, c, []string{k.Lock}, tok.String()).Int64()
				}}
			run := linRunLocks(t, w, workers, ops)
			ops := run.locks.Operations()
			if r := history.Check(history.LockModel(), ops, linCheckTimeout); r.Verdict == porcupine.Illegal || i == 9 {
				r = history.NotLinearizable(t, history.LockModel(), ops, linCheckTimeout)
				t.Logf("run %d: %v; check %v", i+1, run.locks.Counts(), r)
				return
			}
		}
	})
	t.Run("fencing counter reset", func(t *testing.T) {
		// As when maxmemory-policy allkeys-lru evicts the lock's keys, its
		// counter among them: the next fresh acquisition starts again at
		// token 1.
		_, c := testenv.Mini(t)
		w := linLockWorld{rdb: c, store: memory.New(), names: linLockNames(t), opTimeout: 5 * time.Second}
		done := make(chan struct{})
		var resets atomic.Int64
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				case <-time.After(time.Millisecond):
				}
				for _, name := range w.names {
					k := lua.KeysFor(reentrant.DefaultPrefix, name)
					if n, _ := c.HGet(context.Background(), k.Lock, "t").Int(); n >= 2 {
						c.Del(context.Background(), k.Lock, k.Counter)
						resets.Add(1)
					}
				}
			}
		})
		run := linRunLocks(t, w, workers, ops)
		close(done)
		wg.Wait()
		r := history.NotLinearizable(t, history.LockModel(), run.locks.Operations(), linCheckTimeout)
		t.Logf("%v, %d counter resets; check %v", run.locks.Counts(), resets.Load(), r)
	})
}
