package metrics_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
	"github.com/redfence/redfence/storage/redisstore"
	"github.com/redfence/redfence/storage/sqlstore"
)

// staleWrites makes two stale writes (a Put and a Delete) on key of s, and
// checks that accepted writes, reads and refusals are what the store says.
func staleWrites(t *testing.T, s storage.Store, key string) {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, s.Put(ctx, key, []byte("v5"), 5))
	require.ErrorIs(t, s.Put(ctx, key, []byte("v3"), 3), fence.ErrStale)
	require.ErrorIs(t, s.Delete(ctx, key, 4), fence.ErrStale)
	require.ErrorIs(t, s.Put(ctx, key, []byte("v0"), 0), fence.ErrNoToken) // refused, not stale
	rec, err := s.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, storage.Record{Value: []byte("v5"), Token: 5}, rec)
	top, err := s.Highest(ctx, key)
	require.NoError(t, err)
	require.Equal(t, fence.Token(5), top)
	_, err = s.Get(ctx, key+"-missing")
	require.ErrorIs(t, err, storage.ErrNotFound)
}

// Refused stale writes are counted by the name each store was given.
func TestStoreCountsStaleWrites(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		h := newHarness(t)
		rs, err := redisstore.New(b.Client, redisstore.WithPrefix(testenv.Unique(t)))
		require.NoError(t, err)
		cache, orders := h.m.Store("cache", memory.New()), h.m.Store("orders", rs)
		staleWrites(t, cache, "k1")
		staleWrites(t, cache, "k2")
		staleWrites(t, orders, "k1")
		require.NoError(t, orders.Delete(t.Context(), "k1", 6))
		require.ErrorIs(t, orders.Put(t.Context(), "k1", []byte("late"), 5), fence.ErrStale)
		require.NoError(t, orders.Put(t.Context(), "k1", []byte("v6"), 6))

		got := h.collect(t)
		require.Equal(t, map[string]int64{"store=cache": 4, "store=orders": 3}, got.counts["redfence.store.stale_refused"])
		require.Equal(t, "{write}", got.units["redfence.store.stale_refused"])
		require.Len(t, got.counts, 1, "no lock instrument recorded anything")
	})
}

// fake returns what it is told to, and remembers the last call.
type fake struct {
	rec  storage.Record
	tok  fence.Token
	err  error
	call string
}

func (f *fake) Get(context.Context, string) (storage.Record, error) {
	f.call = "get"
	return f.rec, f.err
}

func (f *fake) Put(_ context.Context, key string, v []byte, t fence.Token) error {
	f.call = "put " + key + " " + string(v) + " " + t.String()
	return f.err
}

func (f *fake) Delete(_ context.Context, key string, t fence.Token) error {
	f.call = "delete " + key + " " + t.String()
	return f.err
}

func (f *fake) Highest(context.Context, string) (fence.Token, error) {
	f.call = "highest"
	return f.tok, f.err
}

// The wrapper returns exactly what the store returned, errors included.
func TestStorePassesThrough(t *testing.T) {
	h := newHarness(t)
	stale := &fence.StaleError{Token: 1, Highest: 2}
	other := errors.New("backend down")
	f := &fake{rec: storage.Record{Value: []byte("x"), Token: 9}, tok: 9}
	s := h.m.Store("fake", f)
	ctx := t.Context()
	for _, err := range []error{nil, other, stale} {
		f.err = err
		rec, gerr := s.Get(ctx, "k")
		require.Equal(t, "get", f.call)
		require.Equal(t, f.rec, rec)
		require.True(t, gerr == err, "Get: %v", gerr)
		tok, herr := s.Highest(ctx, "k")
		require.Equal(t, "highest", f.call)
		require.Equal(t, fence.Token(9), tok)
		require.True(t, herr == err, "Highest: %v", herr)
		require.True(t, s.Put(ctx, "k", []byte("v"), 3) == err)
		require.Equal(t, "put k v 3", f.call)
		require.True(t, s.Delete(ctx, "k", 4) == err)
		require.Equal(t, "delete k 4", f.call)
	}
	// Only the stale Put and Delete count, not the stale Get or Highest.
	require.Equal(t, map[string]int64{"store=fake": 2}, h.collect(t).counts["redfence.store.stale_refused"])
	require.Panics(t, func() { h.m.Store("nil", nil) })
}

// Stale counts a refused sqlstore Guard and returns its error unchanged.
func TestStaleGuard(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		db, err := sql.Open("sqlite", sqlstore.SQLiteDSN(filepath.Join(t.TempDir(), "guard.db")))
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		guard(t, db, sqlstore.SQLite, sqlstore.DefaultTable)
	})
	t.Run("postgres", func(t *testing.T) {
		db, err := sql.Open("pgx", testenv.PostgresURL(t))
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		guard(t, db, sqlstore.Postgres, testenv.SQLTable(t, "pgx", testenv.PostgresURL(t), "metrics"))
	})
	t.Run("mysql", func(t *testing.T) {
		db, err := sql.Open("mysql", testenv.MySQLDSN(t))
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		guard(t, db, sqlstore.MySQL, testenv.SQLTable(t, "mysql", testenv.MySQLDSN(t), "metrics"))
	})
}

// guard counts one refused Guard of three, through Stale.
func guard(t *testing.T, db *sql.DB, d sqlstore.Dialect, table string) {
	t.Helper()
	ctx := t.Context()
	s, err := sqlstore.New(db, d, sqlstore.WithTable(table))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	h := newHarness(t)
	run := func(tok fence.Token) error {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback()
		if err := h.m.Stale(ctx, "ledger", s.Guard(ctx, tx, "accounts/1", tok)); err != nil {
			return err
		}
		return tx.Commit()
	}
	require.NoError(t, run(7))
	require.NoError(t, run(7))
	err = run(5)
	require.ErrorIs(t, err, fence.ErrStale)
	var se *fence.StaleError
	require.ErrorAs(t, err, &se)
	require.Equal(t, fence.Token(7), se.Highest)
	require.ErrorIs(t, run(0), fence.ErrNoToken)

	other := errors.New("not stale")
	require.True(t, h.m.Stale(ctx, "ledger", other) == other)
	require.NoError(t, h.m.Stale(ctx, "ledger", nil))
	require.Equal(t, map[string]int64{"store=ledger": 1}, h.collect(t).counts["redfence.store.stale_refused"])
}
