package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/alicebob/miniredis/v2"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/sqlstore"
)

// A fenced key-value store in SQLite: writes carry the lock's token, and a
// lower token than the highest accepted for the key is refused.
func Example() {
	dir, err := os.MkdirTemp("", "redfence-example")
	check(err)
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", sqlstore.SQLiteDSN(filepath.Join(dir, "app.db")))
	check(err)
	defer db.Close()

	ctx := context.Background()
	store, err := sqlstore.New(db, sqlstore.SQLite) // or sqlstore.Postgres
	check(err)
	check(store.Migrate(ctx)) // creates the table if it does not exist

	check(store.Put(ctx, "invoice-42", []byte("paid"), 7)) // token 7: the current holder
	err = store.Put(ctx, "invoice-42", []byte("late"), 5)  // token 5: an older holder
	fmt.Println(errors.Is(err, fence.ErrStale), err)

	rec, err := store.Get(ctx, "invoice-42")
	check(err)
	fmt.Printf("%s (token %d)\n", rec.Value, rec.Token)
	_, err = store.Get(ctx, "invoice-43")
	fmt.Println(errors.Is(err, storage.ErrNotFound))
	// Output:
	// true sqlstore: put "invoice-42": fence: stale token 5 (highest accepted 7)
	// paid (token 7)
	// true
}

// A bank keeps balances in its own accounts table in PostgreSQL. Each
// deposit runs under a redfence lock on "accounts/1" and guards its
// transaction with the lock's token, so a holder whose lease expired while
// it was paused cannot apply its deposit after a newer holder has written.
//
// It runs against the PostgreSQL of $REDFENCE_POSTGRES_URL, and does nothing
// when that is not set.
func ExampleStore_Guard() {
	url := os.Getenv("REDFENCE_POSTGRES_URL")
	if url == "" {
		return
	}
	db, err := sql.Open("pgx", url)
	check(err)
	defer db.Close()
	mr, _ := miniredis.Run() // any Redis; an embedded one here
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locks, err := reentrant.New(rdb)
	check(err)
	defer locks.Close()

	ctx := context.Background()
	fences, err := sqlstore.New(db, sqlstore.Postgres)
	check(err)
	check(fences.Migrate(ctx))
	_, err = db.ExecContext(ctx, `CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)`)
	check(err)
	_, err = db.ExecContext(ctx, `INSERT INTO accounts (id, balance) VALUES (1, 100)`)
	check(err)

	// deposit adds amount to account 1 for the lock holder with token.
	deposit := func(ctx context.Context, token fence.Token, amount int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // does nothing after Commit
		if err := fences.Guard(ctx, tx, "accounts/1", token); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + $1 WHERE id = 1`, amount); err != nil {
			return err
		}
		return tx.Commit()
	}

	a, err := locks.Lock(ctx, "accounts/1") // worker A
	check(err)
	// A is paused past its lease: here Redis's clock jumps ahead instead.
	mr.FastForward(time.Minute)

	// Worker B takes the expired lock, with a newer token, and deposits.
	err = locks.Do(ctx, "accounts/1", func(ctx context.Context, token fence.Token) error {
		return deposit(ctx, token, 50)
	})
	fmt.Println("B:", err)

	// A wakes up and deposits with its old token: refused, nothing written.
	err = deposit(a.Context(), a.Token(), 1000)
	fmt.Println("A: stale:", errors.Is(err, fence.ErrStale))

	var balance int
	check(db.QueryRowContext(ctx, `SELECT balance FROM accounts WHERE id = 1`).Scan(&balance))
	fmt.Println("balance:", balance)
}

// The deposit of ExampleStore_Guard in SQLite, which needs no server.
func ExampleStore_Guard_sqlite() {
	dir, err := os.MkdirTemp("", "redfence-example")
	check(err)
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", sqlstore.SQLiteDSN(filepath.Join(dir, "bank.db")))
	check(err)
	defer db.Close()

	ctx := context.Background()
	fences, err := sqlstore.New(db, sqlstore.SQLite)
	check(err)
	check(fences.Migrate(ctx))
	_, err = db.ExecContext(ctx, `CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)`)
	check(err)
	_, err = db.ExecContext(ctx, `INSERT INTO accounts (id, balance) VALUES (1, 100)`)
	check(err)

	// deposit adds amount to account 1 for the lock holder with token.
	deposit := func(token fence.Token, amount int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // does nothing after Commit
		if err := fences.Guard(ctx, tx, "accounts/1", token); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + ?1 WHERE id = 1`, amount); err != nil {
			return err
		}
		return tx.Commit()
	}

	fmt.Println(deposit(7, 50)) // the current holder, token 7
	err = deposit(5, 1000)      // a paused holder of an older lease wakes up
	fmt.Println(errors.Is(err, fence.ErrStale), err)

	var balance int
	check(db.QueryRowContext(ctx, `SELECT balance FROM accounts WHERE id = 1`).Scan(&balance))
	fmt.Println("balance:", balance)
	// Output:
	// <nil>
	// true sqlstore: guard "accounts/1": fence: stale token 5 (highest accepted 7)
	// balance: 150
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
