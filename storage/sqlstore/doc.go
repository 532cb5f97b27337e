// Package sqlstore is a fenced store in a SQL database, PostgreSQL or
// SQLite, through database/sql, and a guard that fences a caller's own
// tables.
//
// One package serves both databases: the SQL differs only in column types
// and placeholders, which a [Dialect] selects. The package imports no
// driver; the program picks one (the tests use github.com/jackc/pgx/v5/stdlib
// for PostgreSQL and the pure-Go modernc.org/sqlite for SQLite).
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
