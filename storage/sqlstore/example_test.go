package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage/sqlstore"
)

// A bank keeps balances in its own accounts table. Each deposit runs under
// a redfence lock on "accounts/1" and guards its transaction with the
// lock's token, so a holder whose lease expired while it was paused cannot
// apply its deposit after a newer holder has written.
func ExampleStore_Guard() {
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
