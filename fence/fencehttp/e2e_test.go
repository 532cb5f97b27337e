package fencehttp_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/fence/fencehttp"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
	"github.com/redfence/redfence/storage/redisstore"
	"github.com/redfence/redfence/storage/sqlstore"
)

// eachStore runs f with a fresh store of each kind: memory, the Redis
// store on the real Redis, the SQL store on the real PostgreSQL.
func eachStore(t *testing.T, f func(t *testing.T, store storage.Store)) {
	t.Run("memory", func(t *testing.T) { f(t, memory.New()) })
	t.Run("redis", func(t *testing.T) {
		s, err := redisstore.New(testenv.Redis(t), redisstore.WithPrefix(testenv.Unique(t)))
		require.NoError(t, err)
		f(t, s)
	})
	t.Run("postgres", func(t *testing.T) {
		url := testenv.PostgresURL(t)
		db, err := sql.Open("pgx", url)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		s, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(testenv.SQLTable(t, "pgx", url, "http")))
		require.NoError(t, err)
		require.NoError(t, s.Migrate(t.Context()))
		f(t, s)
	})
}

// locks returns a lock client on the real Redis, under a prefix of the
// test's own.
func locks(t *testing.T) *reentrant.Client {
	c, err := reentrant.New(testenv.Redis(t), reentrant.WithPrefix(testenv.Unique(t)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kleppmann's scenario through a service: a holder is paused past its
// lease, the next holder writes through the service, and the paused one's
// request, sent when it wakes, is refused with 409 and the newer token;
// the service keeps the newer holder's data.
func TestPausedHolderRefusedThroughService(t *testing.T) {
	eachStore(t, func(t *testing.T, store storage.Store) {
		srv := httptest.NewServer(service(store, fencehttp.Require()))
		defer srv.Close()
		c, ctx := locks(t), t.Context()

		a, err := c.Lock(ctx, "acct", reentrant.WithTTL(300*time.Millisecond), reentrant.WithoutRenewal())
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, put(t, a.Context(), srv.URL, "acct", "a: first").StatusCode)
		// The pause: a's request leaves only after its lease ran out and
		// b wrote. It keeps a's values (owner, tokens), not its end, as
		// a request already on its way would.
		late := context.WithoutCancel(a.Context())
		<-a.Context().Done()
		b, err := c.Lock(ctx, "acct")
		require.NoError(t, err)
		require.Greater(t, b.Token(), a.Token())
		require.Equal(t, http.StatusNoContent, put(t, b.Context(), srv.URL, "acct", "b").StatusCode)

		resp := put(t, late, srv.URL, "acct", "a: late")
		require.Equal(t, http.StatusConflict, resp.StatusCode)
		var stale *fencehttp.StaleError
		require.ErrorAs(t, fencehttp.ResponseError(resp), &stale)
		require.Equal(t, fencehttp.StaleError{Resource: "acct", Token: a.Token(), Highest: b.Token()}, *stale)

		rec, err := store.Get(ctx, "acct")
		require.NoError(t, err)
		require.Equal(t, "b", string(rec.Value))
		require.Equal(t, b.Token(), rec.Token)
		require.NoError(t, b.Unlock(ctx))
	})
}

// Workers take the lock in turn and write through the service, and each
// sends a late copy of its write after releasing: whatever the order, no
// write is accepted after one with a higher token was, and the final value
// is the highest token's.
func TestInterleavedWritersThroughService(t *testing.T) {
	eachStore(t, func(t *testing.T, store storage.Store) {
		srv := httptest.NewServer(service(store, fencehttp.Require()))
		defer srv.Close()
		c, ctx := locks(t), t.Context()

		var mu sync.Mutex
		var highest fence.Token // the highest token a completed write was accepted with
		var accepted, refused int
		send := func(wctx context.Context, tok fence.Token) {
			mu.Lock()
			before := highest
			mu.Unlock()
			resp := put(t, wctx, srv.URL, "acct", fmt.Sprint(tok))
			mu.Lock()
			defer mu.Unlock()
			switch resp.StatusCode {
			case http.StatusNoContent:
				assert.GreaterOrEqual(t, tok, before, "a write landed after a higher one had")
				highest, accepted = max(highest, tok), accepted+1
			case http.StatusConflict:
				var stale *fencehttp.StaleError
				if assert.ErrorAs(t, fencehttp.ResponseError(resp), &stale) {
					assert.Greater(t, stale.Highest, tok)
				}
				refused++
			default:
				t.Errorf("status %d: %s", resp.StatusCode, bodyOf(t, resp))
			}
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 8 {
					l, err := c.Lock(ctx, "acct")
					if !assertNoError(t, err) {
						return
					}
					send(l.Context(), l.Token())
					late := context.WithoutCancel(l.Context())
					assertNoError(t, l.Unlock(ctx))
					send(late, l.Token())
				}
			})
		}
		wg.Wait()
		rec, err := store.Get(ctx, "acct")
		require.NoError(t, err)
		require.Equal(t, highest.String(), string(rec.Value))
		require.Equal(t, highest, rec.Token)
		require.Equal(t, 64, accepted+refused)
		t.Logf("%d accepted, %d refused", accepted, refused)
	})
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}
