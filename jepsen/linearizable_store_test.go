// The store workload: concurrent writers with fresh, current and stale
// tokens, and readers, against every storage adapter.

package jepsen_test

import (
	"context"
	"database/sql"
	"fmt"
	mrand "math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/jepsen/internal/history"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
	"github.com/redfence/redfence/storage/sqlstore"
)

// linRunStore runs workers concurrent clients against s for ops operations in
// all, on two keys: Puts and Deletes with fresh, current and stale tokens,
// Gets and Highests. Tokens are drawn from a per-key counter, so fresh
// writers race and some of them lose.
func linRunStore(t *testing.T, s storage.Store, workers, ops int, opTimeout time.Duration) *history.Recorder {
	t.Helper()
	base := testenv.Unique(t)
	keys := []string{base + "-x", base + "-y"}
	var issued [2]atomic.Uint64
	rec := history.NewRecorder()
	var budget atomic.Int64
	budget.Store(int64(ops))
	var wg sync.WaitGroup
	for i := range workers {
		rng := mrand.New(mrand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
		wg.Go(func() {
			c := rec.Client()
			for seq := 0; budget.Add(-1) >= 0; seq++ {
				if c.Crashed() {
					c = rec.Client()
				}
				ki := rng.IntN(len(keys))
				key := keys[ki]
				ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
				switch r := rng.IntN(100); {
				case r < 45:
					tok := linToken(rng, &issued[ki])
					_ = c.Put(ctx, s, key, fmt.Sprintf("c%d.%d@%d", i, seq, tok), tok)
				case r < 50:
					_ = c.Delete(ctx, s, key, linToken(rng, &issued[ki]))
				case r < 85:
					_, _ = c.Get(ctx, s, key)
				default:
					_, _ = c.HighestToken(ctx, s, key)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	return rec
}

// linToken returns a fresh token half the time, the latest one issued (which
// may or may not have been written yet) a third of the time, and otherwise
// a stale one.
func linToken(rng *mrand.Rand, issued *atomic.Uint64) fence.Token {
	switch r := rng.IntN(10); {
	case r < 5:
		return fence.Token(issued.Add(1))
	case r < 8:
		return fence.Token(max(issued.Load(), 1))
	}
	return fence.Token(max(int64(issued.Load())-1-int64(rng.IntN(3)), 1))
}

// linStoreCase is one adapter under test, built for a test.
type linStoreCase struct {
	name string
	open func(t *testing.T) storage.Store
}

// linStores lists every adapter: the memory reference, redisstore on
// miniredis and on a real Redis, sqlstore on PostgreSQL and SQLite.
// Adapters whose server is not configured skip.
func linStores() []linStoreCase {
	return []linStoreCase{
		{"memory", func(*testing.T) storage.Store { return memory.New() }},
		{"redisstore/miniredis", func(t *testing.T) storage.Store {
			_, c := testenv.Mini(t)
			return linRedisStore(t, c)
		}},
		{"redisstore/redis", func(t *testing.T) storage.Store { return linRedisStore(t, testenv.Redis(t)) }},
		{"sqlstore/postgres", func(t *testing.T) storage.Store {
			return linSQLStore(t, "pgx", testenv.PostgresURL(t), sqlstore.Postgres)
		}},
		{"sqlstore/sqlite", func(t *testing.T) storage.Store {
			dsn := sqlstore.SQLiteDSN(filepath.Join(t.TempDir(), "store.db"))
			return linSQLStore(t, "sqlite", dsn, sqlstore.SQLite)
		}},
	}
}

// linSQLStore opens a store on a fresh table, dropped when the test ends.
func linSQLStore(t *testing.T, driver, dsn string, d sqlstore.Dialect) storage.Store {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s, err := sqlstore.New(db, d, sqlstore.WithTable(testenv.SQLTable(t, driver, dsn, "jepsen")))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("%s: %v", driver, err)
	}
	return s
}

// TestLinearizableStore: concurrent writers with fresh, current
// and stale tokens, and readers, against every adapter, are linearizable
// against the fenced register: a write with an older token is never
// visible and never raises the highest token.
func TestLinearizableStore(t *testing.T) {
	workers, ops := linScale()
	for _, sc := range linStores() {
		t.Run(sc.name, func(t *testing.T) {
			rec := linRunStore(t, sc.open(t), workers, ops, 5*time.Second)
			n := linCheck(t, sc.name, rec, history.RegisterModel())
			if n.Unknown != 0 || n.Failed == 0 {
				t.Errorf("%v: want no unknown outcome without faults, and some stale writes refused", n)
			}
		})
	}
}
