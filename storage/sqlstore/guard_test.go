package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/sqlstore"
)

// bank is a caller's own table, fenced by a Store's guard.
type bank struct {
	db       *sql.DB
	fences   *sqlstore.Store
	accounts string // quoted table name
	arg      func(int) string
}

func newBank(t *testing.T, db *sql.DB, fences *sqlstore.Store, accounts string) *bank {
	t.Helper()
	b := &bank{db: db, fences: fences, accounts: `"` + accounts + `"`, arg: func(n int) string { return "$" + strconv.Itoa(n) }}
	switch fences.Dialect() {
	case sqlstore.SQLite:
		b.arg = func(n int) string { return "?" + strconv.Itoa(n) }
	case sqlstore.MySQL:
		b.accounts, b.arg = "`"+accounts+"`", func(int) string { return "?" }
	}
	mustExec(t, db,
		`CREATE TABLE `+b.accounts+` (id integer PRIMARY KEY, balance integer NOT NULL)`,
		`INSERT INTO `+b.accounts+` (id, balance) VALUES (1, 100)`)
	return b
}

func (b *bank) balance(t *testing.T) int {
	t.Helper()
	var n int
	if err := b.db.QueryRowContext(t.Context(), `SELECT balance FROM `+b.accounts+` WHERE id = 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// deposit guards first, then writes, then commits.
func (b *bank) deposit(ctx context.Context, token fence.Token, amount int) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := b.fences.Guard(ctx, tx, "accounts/1", token); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE `+b.accounts+` SET balance = balance + `+b.arg(1)+` WHERE id = 1`, amount); err != nil {
		return err
	}
	return tx.Commit()
}

// depositGuardLast writes first and guards last: the order to avoid, but a
// refused guard must still roll the caller's write back.
func (b *bank) depositGuardLast(ctx context.Context, token fence.Token, amount int) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE `+b.accounts+` SET balance = balance + `+b.arg(1)+` WHERE id = 1`, amount); err != nil {
		return err
	}
	if err := b.fences.Guard(ctx, tx, "accounts/1", token); err != nil {
		return err
	}
	return tx.Commit()
}

// accountsScenario is the package example's story, checked step by step.
func accountsScenario(t *testing.T, b *bank) {
	ctx := t.Context()
	if err := b.deposit(ctx, 7, 50); err != nil {
		t.Fatalf("deposit under token 7: %v", err)
	}
	if err := b.deposit(ctx, 7, 25); err != nil {
		t.Fatalf("second deposit under token 7 (same holder): %v", err)
	}
	for name, deposit := range map[string]func(context.Context, fence.Token, int) error{
		"guard first": b.deposit, "guard last": b.depositGuardLast,
	} {
		err := deposit(ctx, 5, 1000)
		var se *fence.StaleError
		if !errors.As(err, &se) || se.Token != 5 || se.Highest != 7 {
			t.Fatalf("%s: deposit under stale token 5: %v; want StaleError{5, 7}", name, err)
		}
		if got := b.balance(t); got != 175 {
			t.Fatalf("%s: balance %d after a refused deposit; want 175", name, got)
		}
	}
	if err := b.deposit(ctx, 9, 1); err != nil {
		t.Fatalf("deposit under a newer token 9: %v", err)
	}
	if got := b.balance(t); got != 176 {
		t.Fatalf("balance %d; want 176", got)
	}
	// The guard shares the store's fence: key "accounts/1" is at 9, with no value.
	if h, err := b.fences.Highest(ctx, "accounts/1"); err != nil || h != 9 {
		t.Fatalf("Highest(accounts/1) = %d, %v; want 9", h, err)
	}
	if _, err := b.fences.Get(ctx, "accounts/1"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get(accounts/1) = %v; want ErrNotFound: a guard writes no value", err)
	}
}

func TestGuardAccountsPostgres(t *testing.T) {
	db := openPostgres(t)
	fences, _ := newPostgresStore(t, db)
	accounts := testenv.SQLTable(t, "pgx", testenv.PostgresURL(t), "accounts")
	accountsScenario(t, newBank(t, db, fences, accounts))
}

func TestGuardAccountsSQLite(t *testing.T) {
	db := openSQLite(t, filepath.Join(t.TempDir(), "bank.db"))
	accountsScenario(t, newBank(t, db, mustNew(t, db, sqlstore.SQLite, "fences"), "accounts"))
}

// TestGuardSerializesPostgres: a second transaction guarding the same
// resource waits on the fence row while the first is open, then is refused
// if its token is lower than the first's, or goes ahead if the first rolled
// back.
func TestGuardSerializesPostgres(t *testing.T) {
	db := openPostgres(t)
	fences, _ := newPostgresStore(t, db)
	ctx := t.Context()

	for _, tc := range []struct {
		name          string
		first, second fence.Token
		commitFirst   bool
		wantStale     bool
	}{
		{"lower after commit", 10, 9, true, true},
		{"equal after commit", 20, 20, true, false},
		{"higher after commit", 30, 31, true, false},
		{"lower after rollback", 50, 41, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx1, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx1.Rollback()
			if err := fences.Guard(ctx, tx1, "res", tc.first); err != nil {
				t.Fatalf("first guard: %v", err)
			}
			var pid1 int
			if err := tx1.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid1); err != nil {
				t.Fatal(err)
			}

			tx2, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx2.Rollback()
			done := make(chan error, 1)
			go func() { done <- fences.Guard(ctx, tx2, "res", tc.second) }()

			// The second guard must be waiting for the first's lock, as
			// PostgreSQL itself reports, not merely slow.
			waitBlockedBy(t, db, pid1)
			select {
			case err := <-done:
				t.Fatalf("second guard returned (%v) while the first transaction was open", err)
			default:
			}

			if tc.commitFirst {
				err = tx1.Commit()
			} else {
				err = tx1.Rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
			var got error
			select {
			case got = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("second guard still blocked 10s after the first transaction ended")
			}
			if tc.wantStale {
				var se *fence.StaleError
				if !errors.As(got, &se) || se.Highest != tc.first {
					t.Fatalf("second guard: %v; want StaleError with highest %d", got, tc.first)
				}
				return
			}
			if got != nil {
				t.Fatalf("second guard: %v; want success", got)
			}
			if err := tx2.Commit(); err != nil {
				t.Fatal(err)
			}
			if h, err := fences.Highest(ctx, "res"); err != nil || h != tc.second {
				t.Fatalf("Highest = %d, %v; want %d", h, err, tc.second)
			}
		})
	}
}

// waitBlockedBy waits until some backend is blocked by pid's locks.
func waitBlockedBy(t *testing.T, db *sql.DB, pid int) {
	t.Helper()
	blocked := testenv.Await(time.Minute, func() bool {
		var n int
		err := db.QueryRowContext(t.Context(),
			`SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	if !blocked {
		t.Fatal("the second guard never blocked on the first transaction's lock")
	}
}

// TestGuardSerializesSQLite: with _txlock=immediate the second transaction
// waits at BEGIN for the first to end, then its guard sees the first's
// token.
func TestGuardSerializesSQLite(t *testing.T) {
	db := openSQLite(t, filepath.Join(t.TempDir(), "guard.db"))
	fences := mustNew(t, db, sqlstore.SQLite, sqlstore.DefaultTable)
	ctx := t.Context()
	tx1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback()
	if err := fences.Guard(ctx, tx1, "res", 10); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		tx2, err := db.BeginTx(ctx, nil)
		if err != nil {
			done <- err
			return
		}
		defer tx2.Rollback()
		done <- fences.Guard(ctx, tx2, "res", 9)
	}()
	select {
	case err := <-done:
		t.Fatalf("second transaction got past BEGIN IMMEDIATE (%v) while the first was open", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx1.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var se *fence.StaleError
		if !errors.As(err, &se) || se.Highest != 10 {
			t.Fatalf("second guard: %v; want StaleError with highest 10", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("second transaction still blocked 10s after the first committed")
	}
}

func TestGuardInvalid(t *testing.T) {
	db := openSQLite(t, filepath.Join(t.TempDir(), "guard.db"))
	fences := mustNew(t, db, sqlstore.SQLite, sqlstore.DefaultTable)
	ctx := t.Context()
	if err := fences.Guard(ctx, nil, "res", 1); !errors.Is(err, storage.ErrInvalid) {
		t.Errorf("nil tx: %v; want ErrInvalid", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := fences.Guard(ctx, tx, "", 1); !errors.Is(err, storage.ErrInvalid) {
		t.Errorf("empty resource: %v; want ErrInvalid", err)
	}
	if err := fences.Guard(ctx, tx, "res", fence.None); !errors.Is(err, fence.ErrNoToken) {
		t.Errorf("zero token: %v; want ErrNoToken", err)
	}
	if err := fences.Guard(ctx, tx, "res", sqlstore.MaxToken+1); !errors.Is(err, storage.ErrInvalid) {
		t.Errorf("token over MaxToken: %v; want ErrInvalid", err)
	}
}

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
