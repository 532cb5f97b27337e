package sqlstore

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/redfence/redfence/storage"
)

// Dialect names the SQL database a Store talks to. The zero Dialect is
// invalid.
type Dialect int

const (
	// Postgres is PostgreSQL, through any database/sql driver; the tests
	// use github.com/jackc/pgx/v5/stdlib. Keys and values are bytea,
	// tokens bigint.
	Postgres Dialect = iota + 1

	// SQLite is SQLite 3.35 or later (for RETURNING), through any
	// database/sql driver; the tests use modernc.org/sqlite. Keys and
	// values are BLOBs, tokens INTEGER. Open it with [SQLiteDSN] or
	// equivalent settings, or concurrent writers fail with SQLITE_BUSY.
	SQLite

	// MySQL is MySQL 8 or MariaDB 10.11 or later with InnoDB tables,
	// through any database/sql driver; the tests use
	// github.com/go-sql-driver/mysql on MariaDB. Keys are VARBINARY(1024),
	// values LONGBLOB, tokens BIGINT UNSIGNED. [New] checks the session's
	// settings (see the package documentation, "MySQL and MariaDB").
	MySQL
)

// String returns "postgres", "sqlite" or "mysql".
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	case MySQL:
		return "mysql"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// arg returns the n-th (1-based) placeholder.
func (d Dialect) arg(n int) string {
	switch d {
	case SQLite:
		return fmt.Sprintf("?%d", n)
	case MySQL:
		return "?" // positional: a statement names each argument once
	}
	return fmt.Sprintf("$%d", n)
}

// quote quotes one identifier part: backticks in MySQL, double quotes
// elsewhere (MySQL reads "x" as a string unless ANSI_QUOTES is on).
func (d Dialect) quote(ident string) string {
	if d == MySQL {
		return "`" + ident + "`"
	}
	return `"` + ident + `"`
}

// identPart is one plain SQL identifier: no quoting tricks to get wrong.
var identPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// checkTable validates a table name, "table" or "schema.table", and
// returns its parts. Names are restricted to letters, digits and
// underscores, at most 63 bytes a part (PostgreSQL's limit; MySQL's is 64),
// and then quoted as well, so a name is never SQL and is used with its
// exact case.
func checkTable(name string) ([]string, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("sqlstore: table name %q has more than one dot: %w", name, storage.ErrInvalid)
	}
	for _, p := range parts {
		if !identPart.MatchString(p) {
			return nil, fmt.Errorf("sqlstore: table name %q: want letters, digits and '_', not starting with a digit, at most 63 bytes per part: %w", name, storage.ErrInvalid)
		}
	}
	return parts, nil
}

// quoteTable returns a table's parts quoted for d.
func (d Dialect) quoteTable(parts []string) string {
	q := make([]string, len(parts))
	for i, p := range parts {
		q[i] = d.quote(p)
	}
	return strings.Join(q, ".")
}

// queries are a Store's statements, built once for its dialect and table.
type queries struct {
	schema  string
	get     string
	highest string
	put     string
	del     string
	guard   string
	check   string // MySQL: the highest, read with the row locked
}

// buildQueries writes the statements. Every write is one INSERT ... ON
// CONFLICT DO UPDATE ... WHERE: the check and the write are one statement,
// and a refused write returns no row. See the package documentation for
// why that is atomic under READ COMMITTED.
func buildQueries(d Dialect, table string) queries {
	if d == MySQL {
		return buildMySQLQueries(table)
	}
	a := d.arg
	blob, integer := "bytea", "bigint"
	if d == SQLite {
		blob, integer = "BLOB", "INTEGER"
	}
	upsert := func(values, set string) string {
		return `INSERT INTO ` + table + ` AS f ("key", "value", "token", "highest") VALUES (` + values + `)
ON CONFLICT ("key") DO UPDATE SET ` + set + `
WHERE f."highest" <= excluded."highest"
RETURNING "highest"`
	}
	return queries{
		schema: `CREATE TABLE IF NOT EXISTS ` + table + ` (
	"key"     ` + blob + ` NOT NULL PRIMARY KEY,
	"value"   ` + blob + `,
	"token"   ` + integer + `,
	"highest" ` + integer + ` NOT NULL,
	CHECK ("highest" > 0),
	CHECK (("value" IS NULL) = ("token" IS NULL)),
	CHECK ("token" IS NULL OR ("token" > 0 AND "token" <= "highest"))
)`,
		get:     `SELECT "value", "token" FROM ` + table + ` WHERE "key" = ` + a(1),
		highest: `SELECT "highest" FROM ` + table + ` WHERE "key" = ` + a(1),
		put: upsert(a(1)+", "+a(2)+", "+a(3)+", "+a(3),
			`"value" = excluded."value", "token" = excluded."token", "highest" = excluded."highest"`),
		del: upsert(a(1)+", NULL, NULL, "+a(2),
			`"value" = NULL, "token" = NULL, "highest" = excluded."highest"`),
		guard: upsert(a(1)+", NULL, NULL, "+a(2),
			`"highest" = excluded."highest"`),
	}
}

// buildMySQLQueries writes MySQL's statements. MySQL has no RETURNING on an
// upsert and no WHERE on ON DUPLICATE KEY UPDATE, so each write is an
// INSERT ... ON DUPLICATE KEY UPDATE whose assignments apply the rule
// themselves, followed in the same transaction by a locking read of the
// row (check): accepted iff the highest is now the write's token. The
// assignments run left to right, each seeing the columns already assigned,
// so "highest" is assigned last: "value" and "token" compare against the
// old highest. The package documentation says why this is atomic.
func buildMySQLQueries(table string) queries {
	keep := func(col, v string) string {
		return "`" + col + "` = IF(`highest` <= VALUES(`highest`), " + v + ", `" + col + "`)"
	}
	upsert := func(values string, cols ...string) string {
		set := make([]string, 0, len(cols)+1)
		for _, c := range cols {
			set = append(set, keep(c, "VALUES(`"+c+"`)"))
		}
		set = append(set, keep("highest", "VALUES(`highest`)"))
		return "INSERT INTO " + table + " (`key`, `value`, `token`, `highest`) VALUES (" + values + ")\nON DUPLICATE KEY UPDATE " + strings.Join(set, ", ")
	}
	return queries{
		schema: "CREATE TABLE IF NOT EXISTS " + table + ` (
	` + "`key`" + `     VARBINARY(1024) NOT NULL PRIMARY KEY,
	` + "`value`" + `   LONGBLOB,
	` + "`token`" + `   BIGINT UNSIGNED,
	` + "`highest`" + ` BIGINT UNSIGNED NOT NULL,
	CHECK (` + "`highest`" + ` > 0),
	CHECK ((` + "`value`" + ` IS NULL) = (` + "`token`" + ` IS NULL)),
	CHECK (` + "`token`" + ` IS NULL OR (` + "`token`" + ` > 0 AND ` + "`token`" + ` <= ` + "`highest`" + `))
) ENGINE=InnoDB`,
		get:     "SELECT `value`, `token` FROM " + table + " WHERE `key` = ?",
		highest: "SELECT `highest` FROM " + table + " WHERE `key` = ?",
		put:     upsert("?, ?, ?, ?", "value", "token"),
		del:     upsert("?, NULL, NULL, ?", "value", "token"),
		guard:   upsert("?, NULL, NULL, ?"),
		check:   "SELECT `highest` FROM " + table + " WHERE `key` = ? FOR UPDATE",
	}
}
