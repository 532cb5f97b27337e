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
)

// String returns "postgres" or "sqlite".
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// arg returns the n-th (1-based) placeholder.
func (d Dialect) arg(n int) string {
	if d == SQLite {
		return fmt.Sprintf("?%d", n)
	}
	return fmt.Sprintf("$%d", n)
}

// identPart is one plain SQL identifier: no quoting tricks to get wrong.
var identPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// quoteTable validates a table name, "table" or "schema.table", and returns
// it quoted. Names are restricted to letters, digits and underscores, at
// most 63 bytes a part (PostgreSQL's limit), and then quoted as well, so a
// name is never SQL and is used with its exact case.
func quoteTable(name string) (string, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("sqlstore: table name %q has more than one dot: %w", name, storage.ErrInvalid)
	}
	for i, p := range parts {
		if !identPart.MatchString(p) {
			return "", fmt.Errorf("sqlstore: table name %q: want letters, digits and '_', not starting with a digit, at most 63 bytes per part: %w", name, storage.ErrInvalid)
		}
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, "."), nil
}

// queries are a Store's statements, built once for its dialect and table.
type queries struct {
	schema  string
	get     string
	highest string
	put     string
	del     string
	guard   string
}

// buildQueries writes the statements. Every write is one INSERT ... ON
// CONFLICT DO UPDATE ... WHERE: the check and the write are one statement,
// and a refused write returns no row. See the package documentation for
// why that is atomic under READ COMMITTED.
func buildQueries(d Dialect, table string) queries {
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
