//go:build unix

package jepsen_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/storage/redisstore"
	"github.com/redfence/redfence/storage/sqlstore"
)

// faultCleanRedis deletes the lock's and the Redis store's keys when the
// test ends, so runs leave nothing behind on the shared Redis.
func faultCleanRedis(t *testing.T, c faultHolderConfig) {
	t.Helper()
	t.Cleanup(func() {
		rdb := redis.NewClient(&redis.Options{Addr: c.RedisAddr, DisableIdentity: true})
		defer rdb.Close()
		k := scripts.KeysFor("redfence", c.Name)
		keys := []string{k.Lock, k.Queue}
		if s, err := redisstore.New(rdb, redisstore.WithPrefix(c.Prefix)); err == nil {
			for _, key := range c.Keys {
				if rk, err := s.Key(key); err == nil {
					keys = append(keys, rk)
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := rdb.Del(ctx, keys...).Err(); err != nil {
			t.Logf("cleanup of %v: %v", keys, err)
		}
	})
}

// faultPGTable creates a fresh store table in PostgreSQL, dropped when the
// test ends, and returns its name.
func faultPGTable(t *testing.T, url string) string {
	t.Helper()
	table := testenv.SQLTable(t, "pgx", url, "jepsen")
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("%s: %v", testenv.PostgresURLVar, err)
	}
	return table
}
