// Package sqlstore is a fenced store in a SQL database, PostgreSQL, SQLite,
// MySQL or MariaDB, through database/sql, and a guard that fences a
// caller's own tables.
//
// One package serves them all: a [Dialect] selects the column types,
// placeholders, quoting and, for MySQL, the shape of a write. The package
// imports no driver; the program picks one (the tests use
// github.com/jackc/pgx/v5/stdlib for PostgreSQL, the pure-Go
// modernc.org/sqlite for SQLite and github.com/go-sql-driver/mysql for
// MySQL and MariaDB).
//
// # The table
//
// A Store keeps one row per key in a table (default [DefaultTable]):
// "key" (bytes, the primary key), "value" and "token" (NULL while the key
// has no value) and "highest", the highest token ever accepted for the key.
// [Store.Migrate] creates it; [Store.Schema] returns the statement for
// programs that run their own migrations. Keys are stored as bytes (bytea,
// BLOB), so any key, NUL bytes and invalid UTF-8 included, round-trips; they
// are at most storage.MaxKeyLen bytes, the limit of every adapter, which
// keeps the primary key well inside PostgreSQL's B-tree entry limit.
// Rows are never deleted: Delete sets the value to NULL and keeps the fence.
//
// # Atomicity
//
// Every write is a single INSERT ... ON CONFLICT ("key") DO UPDATE ...
// WHERE f."highest" <= excluded."highest" RETURNING statement. In
// PostgreSQL, under the default READ COMMITTED isolation, the upsert locks
// the conflicting row and, if a concurrent transaction changed it, evaluates
// the WHERE clause against the newest committed version, not against the
// statement's snapshot; two writers therefore serialize on the row and the
// second sees the first's highest. A refused write returns no row and
// changes nothing (though, in a transaction, it keeps the row locked until
// the transaction ends). In SQLite there is one writer at a time: the
// statement runs under the database's write lock.
//
// # MySQL and MariaDB
//
// MySQL's upsert has no WHERE and no RETURNING, so a write is two
// statements in one transaction: INSERT ... ON DUPLICATE KEY UPDATE whose
// assignments are IF(`highest` <= VALUES(`highest`), new, old), "highest"
// assigned last since MySQL assigns left to right, then SELECT `highest`
// ... FOR UPDATE. InnoDB applies the update part to the newest committed row
// under an exclusive row lock, under REPEATABLE READ and READ COMMITTED
// alike, so writers on one key serialize and each compares with its
// predecessor's highest; the locking read then sees what the upsert left,
// and the write was accepted iff it reads the write's token. A Store with a
// *sql.DB or *sql.Conn runs its own transaction (retrying a deadlock victim,
// which InnoDB rolled back whole); a Guard runs both statements in the
// caller's. [New] refuses a session with autocommit off or READ
// UNCOMMITTED; nothing else is needed from the DSN (see docs/storage.md).
//
// # SQLite settings
//
// Concurrent SQLite writers need a busy timeout, or a writer that finds the
// database locked fails at once with SQLITE_BUSY; transactions that will
// write (such as those carrying a [Store.Guard]) should begin IMMEDIATE,
// taking the write lock at BEGIN, because a deferred transaction that reads
// first and then tries to write can fail with SQLITE_BUSY regardless of the
// timeout. WAL mode lets readers run while a writer works. [SQLiteDSN]
// builds a modernc.org/sqlite data source name with all three.
//
// # Guarding your own tables
//
// [Store.Guard] raises a resource's fence row inside the caller's
// transaction, or fails with fence.ErrStale. The caller then writes its own
// tables in the same transaction and commits; a stale lock holder's
// transaction is refused before it writes anything. Concurrent guards on
// one resource serialize on its fence row until commit or rollback. A guard
// that fails rolls the transaction back itself, so a caller that ignores
// the error still cannot commit: later statements and Commit fail with
// sql.ErrTxDone, on every database and driver.
package sqlstore
