package testenv

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// SQLTable returns a table name of the test's own, "rf_<what>_<random
// hex>" (lower-case letters, digits and underscores, so no quoting is
// needed in any dialect), and drops the table, if it exists, when the test
// ends. The drop goes through a connection of its own, opened with driver
// ("pgx", "mysql") and dsn, since the test's may be closed by then; the
// caller's package registers the driver. A drop that fails fails the test:
// a leftover table would go unnoticed otherwise.
func SQLTable(t testing.TB, driver, dsn, what string) string {
	t.Helper()
	table := "rf_" + what + "_" + randomHex(6)
	t.Cleanup(func() {
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Errorf("drop %s: %v", table, err)
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
			t.Errorf("drop %s: %v", table, err)
		}
	})
	return table
}
