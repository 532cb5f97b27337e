package sqlstore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/sqlstore"
	"github.com/redfence/redfence/storage/storagetest"
)

const (
	contendWriters = 8
	contendWrites  = 500
)

// TestContentionPostgres: 8 writers, each on its own connection (its own
// *sql.DB of one connection), make 500 Puts each on one key with
// interleaved tokens, under PostgreSQL's default READ COMMITTED.
func TestContentionPostgres(t *testing.T) {
	setup := openPostgres(t)
	_, table := newPostgresStore(t, setup)
	// The database's own record of commit order: a trigger appends each
	// accepted write's token to a log; the sequence is drawn while the
	// row lock is held, so for one key log order is commit order.
	log := testenv.SQLTable(t, "pgx", testenv.PostgresURL(t), "log")
	mustExec(t, setup,
		`CREATE TABLE "`+log+`" (seq bigserial PRIMARY KEY, token bigint NOT NULL)`,
		`CREATE FUNCTION "`+log+`_fn"() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN INSERT INTO "`+log+`" (token) VALUES (NEW."token"); RETURN NEW; END $$`,
		`CREATE TRIGGER "`+log+`_trg" AFTER INSERT OR UPDATE ON "`+table+`"
		 FOR EACH ROW EXECUTE FUNCTION "`+log+`_fn"()`,
	)
	// The tables go through testenv.SQLTable; the function, and with it
	// the trigger on the store's table, here (first: cleanups run last in,
	// first out).
	t.Cleanup(func() {
		if _, err := setup.ExecContext(context.Background(), `DROP FUNCTION IF EXISTS "`+log+`_fn"() CASCADE`); err != nil {
			t.Errorf("drop %s_fn: %v", log, err)
		}
	})
	var iso string
	if err := setup.QueryRowContext(t.Context(), `SHOW default_transaction_isolation`).Scan(&iso); err != nil {
		t.Fatal(err)
	}
	stores := make([]storage.Store, contendWriters)
	for i := range stores {
		db := openPostgres(t)
		db.SetMaxOpenConns(1)
		if i == 0 {
			db.SetMaxOpenConns(2) // writer 0 and the readers
		}
		stores[i] = mustNew(t, db, sqlstore.Postgres, table)
	}
	st := storagetest.Concurrent(t, stores, "contended", contendWrites)
	checkLog(t, setup, `"`+log+`"`, st)
	t.Logf("postgres (%s): %d writers x %d puts on separate connections: %d accepted, %d refused as stale, 0 stale accepted, %d concurrent reads, in %v",
		iso, st.Writers, contendWrites, st.Accepted, st.Refused, st.Reads, st.Duration)
}

// TestContentionSQLite: the same on one SQLite file, each writer with its
// own connection, settings from SQLiteDSN.
func TestContentionSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "contended.db")
	setup := openSQLite(t, path)
	table := sqlstore.DefaultTable
	mustNew(t, setup, sqlstore.SQLite, table)
	mustExec(t, setup,
		`CREATE TABLE log (seq INTEGER PRIMARY KEY AUTOINCREMENT, token INTEGER NOT NULL)`,
		`CREATE TRIGGER log_i AFTER INSERT ON "`+table+`" BEGIN INSERT INTO log (token) VALUES (NEW."token"); END`,
		`CREATE TRIGGER log_u AFTER UPDATE ON "`+table+`" BEGIN INSERT INTO log (token) VALUES (NEW."token"); END`,
	)
	stores := make([]storage.Store, contendWriters)
	for i := range stores {
		db := openSQLite(t, path)
		db.SetMaxOpenConns(1)
		if i == 0 {
			db.SetMaxOpenConns(2)
		}
		stores[i] = mustNew(t, db, sqlstore.SQLite, table)
	}
	st := storagetest.Concurrent(t, stores, "contended", contendWrites)
	checkLog(t, setup, `"log"`, st)
	t.Logf("sqlite (WAL, busy_timeout, one writer at a time): %d writers x %d puts on separate connections: %d accepted, %d refused as stale, 0 stale accepted, %d concurrent reads, in %v",
		st.Writers, contendWrites, st.Accepted, st.Refused, st.Reads, st.Duration)
}

// checkLog checks the commit-order log: one entry per accepted write, and
// tokens strictly increasing in commit order (tokens are unique, so a
// repeat or a decrease is a stale write that got in). log is quoted.
func checkLog(t *testing.T, db *sql.DB, log string, st storagetest.Stats) {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT token FROM `+log+` ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var n int
	var prev int64
	for rows.Next() {
		var tok int64
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		if tok <= prev {
			t.Errorf("commit order: token %d committed after token %d", tok, prev)
		}
		prev = tok
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != st.Accepted {
		t.Errorf("the database committed %d writes; the writers saw %d accepted", n, st.Accepted)
	}
	if prev != int64(st.Highest) {
		t.Errorf("last committed token %d; want the highest, %d", prev, st.Highest)
	}
}

func mustExec(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}
