package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/sqlstore"
)

// refusedGuard checks that a transaction whose guard failed cannot commit
// anything, even for a caller that ignores every error and calls Commit:
// rows written before and after the guard never become visible to another
// connection, Commit reports an error, and the connection goes back to the
// pool outside any transaction (so later work is neither swallowed by the
// dead transaction nor run without one). db should hand out a single
// connection, so the dead transaction's connection is the one reused;
// other is a separate connection pool on the same database.
func refusedGuard(t *testing.T, db, other *sql.DB, fences *sqlstore.Store, notes string) {
	ctx := t.Context()
	arg := func(n int) string { return "$" + strconv.Itoa(n) }
	switch fences.Dialect() {
	case sqlstore.SQLite:
		arg = func(n int) string { return "?" + strconv.Itoa(n) }
	case sqlstore.MySQL:
		arg = func(int) string { return "?" }
	}
	insert := `INSERT INTO ` + notes + ` (id, body) VALUES (` + arg(1) + `, ` + arg(2) + `)`
	count := func(t *testing.T) int {
		t.Helper()
		var n int
		if err := other.QueryRowContext(ctx, `SELECT count(*) FROM `+notes).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	mustExec(t, db, `CREATE TABLE `+notes+` (id integer PRIMARY KEY, body text NOT NULL)`)

	// The current holder, token 10, guards and commits.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fences.Guard(ctx, tx, "notes", 10); err != nil {
		t.Fatalf("guard with token 10: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	for i, tc := range []struct {
		name   string
		token  fence.Token
		cancel bool // the guard's context ends before it runs
		want   error
	}{
		{"stale", 5, false, fence.ErrStale},
		{"zero token", fence.None, false, fence.ErrNoToken},
		{"cancelled", 10, true, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := 100 * (i + 1)
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, insert, id, "written before the guard"); err != nil {
				t.Fatal(err)
			}
			gctx, cancel := context.WithCancel(ctx)
			if tc.cancel {
				cancel()
			}
			defer cancel()
			if err := fences.Guard(gctx, tx, "notes", tc.token); !errors.Is(err, tc.want) {
				t.Fatalf("guard with token %d: %v; want %v", tc.token, err, tc.want)
			}
			// A careless caller ignores the refusal and carries on.
			afterErr := func() error { _, err := tx.ExecContext(ctx, insert, id+1, "written after the guard"); return err }()
			commitErr := tx.Commit()
			if n := count(t); n != 0 {
				t.Fatalf("%d rows of the refused transaction are visible (write after the guard: %v, Commit: %v); want none", n, afterErr, commitErr)
			}
			if !errors.Is(commitErr, sql.ErrTxDone) || !errors.Is(afterErr, sql.ErrTxDone) {
				t.Fatalf("after the refusal: write %v, Commit %v; want sql.ErrTxDone for both: the guard ends the transaction", afterErr, commitErr)
			}
			if err := tx.Rollback(); !errors.Is(err, sql.ErrTxDone) {
				t.Fatalf("the caller's own Rollback: %v; want sql.ErrTxDone", err)
			}

			// The connection is back in the pool outside any transaction:
			// an autocommit write lands at once, and a new transaction
			// under the current token commits.
			if _, err := db.ExecContext(ctx, insert, id+2, "autocommit"); err != nil {
				t.Fatalf("autocommit write after the refused transaction: %v", err)
			}
			if n := count(t); n != 1 {
				t.Fatalf("%d rows visible after one autocommit write; want 1", n)
			}
			tx2, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx2.Rollback()
			if err := fences.Guard(ctx, tx2, "notes", 10); err != nil {
				t.Fatalf("guard with token 10 after the refused transaction: %v", err)
			}
			if _, err := tx2.ExecContext(ctx, insert, id+3, "current holder"); err != nil {
				t.Fatal(err)
			}
			if err := tx2.Commit(); err != nil {
				t.Fatal(err)
			}
			if n := count(t); n != 2 {
				t.Fatalf("%d rows visible; want 2", n)
			}
			if _, err := db.ExecContext(ctx, `DELETE FROM `+notes); err != nil {
				t.Fatal(err)
			}
			if h, err := fences.Highest(ctx, "notes"); err != nil || h != 10 {
				t.Fatalf("Highest(notes) = %d, %v; want 10", h, err)
			}
		})
	}
}

func TestGuardRefusedCannotCommitPostgres(t *testing.T) {
	db := openPostgres(t)
	db.SetMaxOpenConns(1)
	fences, _ := newPostgresStore(t, db)
	notes := testenv.SQLTable(t, "pgx", testenv.PostgresURL(t), "notes")
	refusedGuard(t, db, openPostgres(t), fences, notes)
}

func TestGuardRefusedCannotCommitSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.db")
	db := openSQLite(t, path)
	db.SetMaxOpenConns(1)
	refusedGuard(t, db, openSQLite(t, path), mustNew(t, db, sqlstore.SQLite, sqlstore.DefaultTable), `"notes"`)
}

// TestGuardKeyLength: a resource of exactly storage.MaxKeyLen bytes can be
// guarded; one byte more is refused with storage.ErrInvalid.
func TestGuardKeyLength(t *testing.T) {
	for name, db := range map[string]func(t *testing.T) (*sql.DB, *sqlstore.Store){
		"postgres": func(t *testing.T) (*sql.DB, *sqlstore.Store) {
			db := openPostgres(t)
			s, _ := newPostgresStore(t, db)
			return db, s
		},
		"sqlite": func(t *testing.T) (*sql.DB, *sqlstore.Store) {
			db := openSQLite(t, filepath.Join(t.TempDir(), "guard.db"))
			return db, mustNew(t, db, sqlstore.SQLite, sqlstore.DefaultTable)
		},
	} {
		t.Run(name, func(t *testing.T) {
			db, fences := db(t)
			ctx := t.Context()
			long := string(make([]byte, storage.MaxKeyLen)) // NULs: any bytes are a key
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if err := fences.Guard(ctx, tx, long, 3); err != nil {
				t.Fatalf("guard of a %d-byte resource: %v", len(long), err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if h, err := fences.Highest(ctx, long); err != nil || h != 3 {
				t.Fatalf("Highest = %d, %v; want 3", h, err)
			}
			tx, err = db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if err := fences.Guard(ctx, tx, long+"x", 3); !errors.Is(err, storage.ErrInvalid) {
				t.Fatalf("guard of a %d-byte resource: %v; want storage.ErrInvalid", len(long)+1, err)
			}
		})
	}
}
