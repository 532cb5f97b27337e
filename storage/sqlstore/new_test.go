package sqlstore_test

import (
	"bytes"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/sqlstore"
)

func TestNewInvalid(t *testing.T) {
	db := openSQLite(t, filepath.Join(t.TempDir(), "x.db"))
	var nilDB *sql.DB
	for name, f := range map[string]func() (*sqlstore.Store, error){
		"nil db":       func() (*sqlstore.Store, error) { return sqlstore.New(nil, sqlstore.SQLite) },
		"typed nil db": func() (*sqlstore.Store, error) { return sqlstore.New(nilDB, sqlstore.SQLite) },
		"zero dialect": func() (*sqlstore.Store, error) { return sqlstore.New(db, sqlstore.Dialect(0)) },
		"dialect 99":   func() (*sqlstore.Store, error) { return sqlstore.New(db, sqlstore.Dialect(99)) },
		"nil option":   func() (*sqlstore.Store, error) { return sqlstore.New(db, sqlstore.SQLite, nil) },
	} {
		if s, err := f(); !errors.Is(err, storage.ErrInvalid) || s != nil {
			t.Errorf("%s: New = %v, %v; want nil, ErrInvalid", name, s, err)
		}
	}
	for _, table := range []string{
		"", ".", "a.", ".a", "a.b.c", "1abc", "a-b", "a b", `x"; DROP TABLE y; --`, `a"b`, "a;b",
		"ünï", strings.Repeat("a", 64), "a." + strings.Repeat("b", 64),
	} {
		if s, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(table)); !errors.Is(err, storage.ErrInvalid) || s != nil {
			t.Errorf("table %q: New = %v, %v; want nil, ErrInvalid", table, s, err)
		}
	}
	for table, quoted := range map[string]string{
		"fences":                `"fences"`,
		"App_Fences2":           `"App_Fences2"`,
		"audit.fences":          `"audit"."fences"`,
		"_x":                    `"_x"`,
		strings.Repeat("a", 63): `"` + strings.Repeat("a", 63) + `"`,
		sqlstore.DefaultTable:   `"redfence_store"`,
	} {
		s, err := sqlstore.New(db, sqlstore.SQLite, sqlstore.WithTable(table))
		if err != nil {
			t.Errorf("table %q: New: %v", table, err)
		} else if s.Table() != quoted {
			t.Errorf("table %q: Table() = %q, want %q", table, s.Table(), quoted)
		}
	}
}

// TestSchemaQualifiedPostgres: a table in its own schema works end to end.
func TestSchemaQualifiedPostgres(t *testing.T) {
	db := openPostgres(t)
	schema := uniqueTable()
	mustExec(t, db, `CREATE SCHEMA "`+schema+`"`)
	t.Cleanup(func() { _, _ = db.Exec(`DROP SCHEMA "` + schema + `" CASCADE`) })
	s := mustNew(t, db, sqlstore.Postgres, schema+".Fences")
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if err := s.Put(t.Context(), "k", []byte("v"), 3); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM "` + schema + `"."Fences"`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows in %s.\"Fences\" = %d, %v; want 1", schema, n, err)
	}
}

// TestSQLiteDSN: the DSN opens exactly the named file, even with URI
// metacharacters in its path, with the documented settings in force.
func TestSQLiteDSN(t *testing.T) {
	path := filepath.Join(t.TempDir(), "odd #name? 100%.db")
	db := openSQLite(t, path)
	s := mustNew(t, db, sqlstore.SQLite, sqlstore.DefaultTable)
	if err := s.Put(t.Context(), "k", []byte("v"), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file not at %q: %v", path, err)
	}
	var mode string
	var timeout int
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
	if err := db.QueryRow(`PRAGMA busy_timeout`).Scan(&timeout); err != nil || timeout != 10000 {
		t.Errorf("busy_timeout = %d, %v; want 10000", timeout, err)
	}
	if !bytes.Contains([]byte(sqlstore.SQLiteDSN("a")), []byte("_txlock=immediate")) {
		t.Errorf("DSN %q does not begin transactions IMMEDIATE", sqlstore.SQLiteDSN("a"))
	}
}
