package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage"
)

// beginner is a DB that can start a transaction: *sql.DB and *sql.Conn.
type beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// checkMySQL refuses a db whose session would make the MySQL store wrong:
//   - autocommit off: every plain SELECT would join one long transaction,
//     and under REPEATABLE READ Get would keep reading its first snapshot;
//   - READ UNCOMMITTED: Get could return a value whose write then rolled
//     back;
//   - a DB that is not a transaction and cannot begin one: a write's two
//     statements must share one.
//
// It reads the settings of one connection of the pool; settings given in
// the DSN apply to every connection, a SET SESSION to one only.
func checkMySQL(db DB) error {
	_, isTx := db.(*sql.Tx)
	if _, ok := db.(beginner); !ok && !isTx {
		return fmt.Errorf("sqlstore: mysql needs a *sql.DB, *sql.Conn or *sql.Tx (or another DB with BeginTx), not %T: %w", db, storage.ErrInvalid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var autocommit int
	if err := db.QueryRowContext(ctx, "SELECT @@session.autocommit").Scan(&autocommit); err != nil {
		return fmt.Errorf("sqlstore: mysql: read the session's settings: %w", withCtx(ctx, err))
	}
	// MySQL 8 and MariaDB 11.1 call it transaction_isolation; MariaDB
	// 10.x only tx_isolation.
	var iso string
	err := db.QueryRowContext(ctx, "SELECT @@session.transaction_isolation").Scan(&iso)
	if err != nil {
		if err = db.QueryRowContext(ctx, "SELECT @@session.tx_isolation").Scan(&iso); err != nil {
			return fmt.Errorf("sqlstore: mysql: read the session's isolation level: %w", withCtx(ctx, err))
		}
	}
	switch {
	case autocommit != 1 && !isTx:
		return fmt.Errorf("sqlstore: mysql: autocommit is off (set autocommit=true in the DSN, or leave it at the server's default): Get would read a stale snapshot: %w", storage.ErrInvalid)
	case strings.EqualFold(strings.ReplaceAll(iso, "_", "-"), "READ-UNCOMMITTED"):
		return fmt.Errorf("sqlstore: mysql: isolation READ UNCOMMITTED would let Get read writes that roll back; use READ COMMITTED or REPEATABLE READ: %w", storage.ErrInvalid)
	}
	return nil
}

// mysqlAttempts bounds how often a write of its own transaction is retried
// when InnoDB picked it as a deadlock victim (it was rolled back whole).
const mysqlAttempts = 5

// writeMySQL runs one write (put, del or guard) and the locking read of the
// row's highest in one transaction: db's own when it is a *sql.Tx (a
// Guard's), else a transaction of its own, committed when the write was
// accepted. It returns the highest the row holds after the write.
func (s *Store) writeMySQL(ctx context.Context, db DB, query, key string, args ...any) (fence.Token, error) {
	if tx, ok := db.(*sql.Tx); ok {
		return s.upsertAndCheck(ctx, tx, query, key, args...)
	}
	b := db.(beginner) // New checked
	for attempt := 1; ; attempt++ {
		tx, err := b.BeginTx(ctx, nil)
		if err != nil {
			return fence.None, fmt.Errorf("begin: %w (nothing was written)", withCtx(ctx, err))
		}
		h, err := s.upsertAndCheck(ctx, tx, query, key, args...)
		if err != nil {
			_ = tx.Rollback()
			if isDeadlock(err) && attempt < mysqlAttempts {
				continue // rolled back whole: safe to run again
			}
			return fence.None, fmt.Errorf("%w (rolled back: nothing was written)", err)
		}
		if err := tx.Commit(); err != nil {
			return fence.None, fmt.Errorf("commit: %w (outcome unknown: the write was applied whole or not at all)", withCtx(ctx, err))
		}
		return h, nil
	}
}

// upsertAndCheck runs the upsert and reads the row's highest, locked, in tx.
func (s *Store) upsertAndCheck(ctx context.Context, tx *sql.Tx, query, key string, args ...any) (fence.Token, error) {
	if _, err := tx.ExecContext(ctx, query, args...); err != nil {
		return fence.None, withCtx(ctx, err)
	}
	var h uint64
	if err := tx.QueryRowContext(ctx, s.q.check, []byte(key)).Scan(&h); err != nil {
		return fence.None, withCtx(ctx, err)
	}
	return fence.Token(h), nil
}

// isDeadlock reports InnoDB's deadlock error (1213, SQLSTATE 40001), which
// rolls the victim's transaction back whole. Matched on the text drivers
// print ("Error 1213 (40001): Deadlock found ..."), since this package
// imports no driver.
func isDeadlock(err error) bool {
	s := err.Error()
	return strings.Contains(s, "1213") && strings.Contains(s, "Deadlock")
}
