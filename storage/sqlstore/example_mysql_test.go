package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage/sqlstore"
)

// A Guard in a MySQL (or MariaDB) transaction: the same story as
// ExampleStore_Guard, on MySQL. The DSN is a github.com/go-sql-driver/mysql
// one; the store needs nothing special from it.
//
// It runs against the server of $REDFENCE_MYSQL_DSN, and does nothing when
// that is not set.
func ExampleStore_Guard_mysql() {
	dsn := os.Getenv("REDFENCE_MYSQL_DSN") // such as "root@tcp(127.0.0.1:3306)/app"
	if dsn == "" {
		return
	}
	db, err := sql.Open("mysql", dsn)
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
	fences, err := sqlstore.New(db, sqlstore.MySQL)
	check(err)
	check(fences.Migrate(ctx))
	_, err = db.ExecContext(ctx, `CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL) ENGINE=InnoDB`)
	check(err)
	_, err = db.ExecContext(ctx, `INSERT INTO accounts (id, balance) VALUES (1, 100)`)
	check(err)

	deposit := func(ctx context.Context, token fence.Token, amount int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // does nothing after Commit
		if err := fences.Guard(ctx, tx, "accounts/1", token); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + ? WHERE id = 1`, amount); err != nil {
			return err
		}
		return tx.Commit()
	}

	a, err := locks.Lock(ctx, "accounts/1") // worker A
	check(err)
	mr.FastForward(time.Minute) // A is paused past its lease

	err = locks.Do(ctx, "accounts/1", func(ctx context.Context, token fence.Token) error {
		return deposit(ctx, token, 50) // worker B, with a newer token
	})
	fmt.Println("B:", err)

	err = deposit(a.Context(), a.Token(), 1000) // A wakes up: refused
	fmt.Println("A: stale:", errors.Is(err, fence.ErrStale))

	var balance int
	check(db.QueryRowContext(ctx, `SELECT balance FROM accounts WHERE id = 1`).Scan(&balance))
	fmt.Println("balance:", balance)
}

// TestExampleStoreGuardMySQL runs ExampleStore_Guard_mysql, which go test
// only compiles, against the server of REDFENCE_MYSQL_DSN, in a database of
// its own, and checks what it prints.
func TestExampleStoreGuardMySQL(t *testing.T) {
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	admin := openMySQLConfig(t, cfg.Clone())
	dbName := "rf_example_" + strings.TrimPrefix(uniqueTable(), "rf_test_")
	if _, err := admin.ExecContext(t.Context(), "CREATE DATABASE `"+dbName+"`"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := sql.Open("mysql", testenv.MySQLDSN(t))
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := c.ExecContext(context.Background(), "DROP DATABASE `"+dbName+"`"); err != nil {
			t.Errorf("drop database %s: %v", dbName, err)
		}
	})
	cfg.DBName = dbName
	t.Setenv(testenv.MySQLDSNVar, cfg.FormatDSN())

	got := stdoutOf(t, ExampleStore_Guard_mysql)
	want := `B: <nil>
A: stale: true
balance: 150
`
	if got != want {
		t.Errorf("ExampleStore_Guard_mysql printed:\n%s\nwant:\n%s", got, want)
	}
}
