package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage"
)

var _ storage.Store = (*Store)(nil)

const (
	// DefaultTable is the table a Store uses unless [WithTable] says
	// otherwise.
	DefaultTable = "redfence_store"

	// MaxToken is the highest token a Store can record: tokens are stored
	// as signed 64-bit integers (bigint, INTEGER). Higher tokens are
	// refused with storage.ErrInvalid, never clamped. Redis INCR, which
	// issues redfence tokens, cannot go higher either.
	MaxToken fence.Token = math.MaxInt64
)

// DB is what a Store needs from database/sql. *sql.DB is the usual choice;
// *sql.Conn and *sql.Tx satisfy it too, which makes every call run on that
// connection or inside that transaction.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Store is a [storage.Store] in a SQL table. It is safe for concurrent use
// by multiple goroutines (as far as its DB is) and, sharing one database, by
// multiple processes. A Store holds only configuration and may be copied.
type Store struct {
	db    DB
	d     Dialect
	table string // quoted
	q     queries
}

// Option configures a Store. An option given a bad value makes New fail
// with an error wrapping storage.ErrInvalid; nothing is clamped.
type Option func(*config) error

type config struct{ table []string } // unquoted parts

// WithTable sets the table, "name" or "schema.name" (default
// [DefaultTable]). Each part must be letters, digits and underscores, not
// starting with a digit, at most 63 bytes. The name is quoted, so its case
// is kept as given.
func WithTable(name string) Option {
	return func(c *config) error {
		parts, err := checkTable(name)
		if err != nil {
			return err
		}
		c.table = parts
		return nil
	}
}

// New returns a Store using db in dialect d. For PostgreSQL and SQLite it
// does not touch the database; for MySQL it reads the session's settings
// once (at most 10 s) and refuses those that would make the store wrong
// (autocommit off, READ UNCOMMITTED), and a db that can neither begin a
// transaction nor is one. Call [Store.Migrate] (or run [Store.Schema]) to
// create the table. New returns an error wrapping storage.ErrInvalid for a
// nil db, an unknown dialect, a nil option, a bad table name or refused
// MySQL settings, and the database error when MySQL's could not be read.
// The caller owns db and closes it.
func New(db DB, d Dialect, opts ...Option) (*Store, error) {
	if isNil(db) {
		return nil, fmt.Errorf("sqlstore: nil database: %w", storage.ErrInvalid)
	}
	if d != Postgres && d != SQLite && d != MySQL {
		return nil, fmt.Errorf("sqlstore: unknown %v: %w", d, storage.ErrInvalid)
	}
	var c config
	for _, o := range append([]Option{WithTable(DefaultTable)}, opts...) {
		if o == nil {
			return nil, fmt.Errorf("sqlstore: nil option: %w", storage.ErrInvalid)
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	table := d.quoteTable(c.table)
	if d == MySQL {
		if err := checkMySQL(db); err != nil {
			return nil, err
		}
	}
	return &Store{db: db, d: d, table: table, q: buildQueries(d, table)}, nil
}

// isNil catches typed nil pointers of the usual DB types, which a plain
// interface comparison misses.
func isNil(db DB) bool {
	switch v := db.(type) {
	case nil:
		return true
	case *sql.DB:
		return v == nil
	case *sql.Conn:
		return v == nil
	case *sql.Tx:
		return v == nil
	}
	return false
}

// Dialect returns the Store's dialect.
func (s *Store) Dialect() Dialect { return s.d }

// Table returns the Store's table name, quoted as it appears in SQL.
func (s *Store) Table() string { return s.table }

// Schema returns the CREATE TABLE IF NOT EXISTS statement for the Store's
// table, for programs that run their own migrations.
func (s *Store) Schema() string { return s.q.schema }

// Migrate creates the Store's table if it does not exist. It is safe to
// call on every start, from several processes at once. It does not alter
// an existing table of that name.
//
// On PostgreSQL two CREATE TABLE IF NOT EXISTS of one new table can race:
// the one that loses fails with a unique violation on the catalog's type
// names (SQLSTATE 23505), "type already exists" (42710) or "relation
// already exists" (42P07) once the other has committed. Migrate then runs the statement again, up to twice,
// which finds the table; with a driver whose errors do not carry a
// SQLSTATE (a SQLState() string method, as pgx's have) the error is
// returned as it is.
func (s *Store) Migrate(ctx context.Context) error {
	var err error
	for range 3 {
		if _, err = s.db.ExecContext(ctx, s.q.schema); err == nil || !createRaced(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("sqlstore: create table %s: %w", s.table, withCtx(ctx, err))
	}
	return nil
}

// createRaced reports whether err is PostgreSQL's answer to a CREATE TABLE
// IF NOT EXISTS that another session committed first: 23505, 42710 or
// 42P07.
func createRaced(err error) bool {
	var e interface{ SQLState() string }
	if !errors.As(err, &e) {
		return false
	}
	code := e.SQLState()
	return code == "23505" || code == "42710" || code == "42P07"
}
