package sqlstore_test

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/redfence/redfence/internal/testkit/netfault"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/sqlstore"
	"github.com/redfence/redfence/storage/storagetest"
)

// uniqueTable returns a table name no other test or run uses.
func uniqueTable() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "rf_test_" + hex.EncodeToString(b[:])
}

// openPostgres opens the PostgreSQL of REDFENCE_POSTGRES_URL (or skips),
// closed when the test ends.
func openPostgres(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.PingContext(t.Context()); err != nil {
		t.Fatalf("%s: %v", testenv.PostgresURLVar, err)
	}
	return db
}

// newPostgresStore makes a store on a fresh table, dropped when the test
// ends, and returns the table's name too.
func newPostgresStore(t *testing.T, db *sql.DB) (*sqlstore.Store, string) {
	t.Helper()
	table := testenv.SQLTable(t, "pgx", testenv.PostgresURL(t), "test")
	return mustNew(t, db, sqlstore.Postgres, table), table
}

// openSQLite opens path with the package's recommended settings.
func openSQLite(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqlstore.SQLiteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func mustNew(t *testing.T, db sqlstore.DB, d sqlstore.Dialect, table string) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.New(db, d, sqlstore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

var sqlOptions = []storagetest.Option{
	storagetest.WithMaxToken(sqlstore.MaxToken),
}

func TestConformancePostgres(t *testing.T) {
	testenv.PostgresURL(t) // skip the whole suite, not each subtest, without a server
	storagetest.Run(t, func(t *testing.T) storage.Store {
		s, _ := newPostgresStore(t, openPostgres(t))
		return s
	}, append(sqlOptions, storagetest.WithFault(func(t *testing.T) storagetest.Fault {
		// PostgreSQL becomes unreachable mid-call: a proxy in front of it
		// resets every connection and refuses new ones.
		direct := openPostgres(t)
		_, table := newPostgresStore(t, direct)
		proxied, proxy := openPostgresProxied(t)
		return storagetest.Fault{
			Store: mustNew(t, proxied, sqlstore.Postgres, table),
			Break: func() {
				proxy.RefuseNew(true)
				proxy.ResetAll()
			},
			Reopen: func(t *testing.T) storage.Store { return mustNew(t, direct, sqlstore.Postgres, table) },
		}
	}))...)
}

// openPostgresProxied opens PostgreSQL through a fault-injection proxy.
func openPostgresProxied(t *testing.T) (*sql.DB, *netfault.Proxy) {
	t.Helper()
	u, err := url.Parse(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netfault.New(u.Host)
	if err != nil {
		t.Fatalf("cannot proxy %s (%v): the broken-backend test needs a loopback PostgreSQL", u.Host, err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	u.Host = proxy.Addr()
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, proxy
}

func TestConformanceSQLite(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Store {
		return mustNew(t, openSQLite(t, filepath.Join(t.TempDir(), "store.db")), sqlstore.SQLite, sqlstore.DefaultTable)
	}, append(sqlOptions, storagetest.WithFault(func(t *testing.T) storagetest.Fault {
		path := filepath.Join(t.TempDir(), "store.db")
		db := openSQLite(t, path)
		return storagetest.Fault{
			Store: mustNew(t, db, sqlstore.SQLite, sqlstore.DefaultTable),
			Break: func() { _ = db.Close() },
			Reopen: func(t *testing.T) storage.Store {
				return mustNew(t, openSQLite(t, path), sqlstore.SQLite, sqlstore.DefaultTable)
			},
		}
	}))...)
}

// FuzzStore sends arbitrary keys, values and tokens to the SQL store on a
// SQLite file and checks every answer against the in-memory reference.
// Tokens above sqlstore.MaxToken are refused as invalid by design; the
// reference knows no such bound, so the fuzzer keeps tokens below it.
func FuzzStore(f *testing.F) {
	f.Add(byte(1), "\x00\xff", []byte{0, 1}, uint64(1<<62))
	db, err := sql.Open("sqlite", sqlstore.SQLiteDSN(filepath.Join(f.TempDir(), "fuzz.db")))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = db.Close() })
	s, err := sqlstore.New(db, sqlstore.SQLite)
	if err == nil {
		err = s.Migrate(f.Context())
	}
	if err != nil {
		f.Fatal(err)
	}
	storagetest.Fuzz(f, s, uint64(sqlstore.MaxToken))
}

// Migrate is safe to call from several processes starting at once: on
// PostgreSQL two CREATE TABLE IF NOT EXISTS of one new table can race
// (the second fails on pg_type's unique index, SQLSTATE 23505), which a
// fleet starting together meets. Eight Migrate calls of each of five new
// tables, started together on their own connections, all succeed.
func TestMigrateConcurrentlyPostgres(t *testing.T) {
	db := openPostgres(t)
	db.SetMaxOpenConns(16)
	for range 5 {
		table := testenv.SQLTable(t, "pgx", testenv.PostgresURL(t), "migrate")
		start := make(chan struct{})
		errs := make(chan error, 8)
		for range 8 {
			go func() {
				s, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(table))
				if err == nil {
					<-start
					err = s.Migrate(t.Context())
				}
				errs <- err
			}()
		}
		close(start)
		for range 8 {
			if err := <-errs; err != nil {
				t.Fatalf("Migrate of %s, 8 at once: %v", table, err)
			}
		}
	}
}
