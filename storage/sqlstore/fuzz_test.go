package sqlstore_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/redfence/redfence/storage/sqlstore"
	"github.com/redfence/redfence/storage/storagetest"
)

// FuzzStore sends arbitrary keys, values and tokens to the SQL store on a
// SQLite file and checks every answer against the in-memory reference.
// Tokens above sqlstore.MaxToken are refused as invalid by design; the
// reference knows no such bound, so the fuzzer keeps tokens below it.
func FuzzStore(f *testing.F) {
	f.Add(byte(0), "k", []byte("v"), uint64(1))
	f.Add(byte(2), "{a}", []byte{}, uint64(5))
	f.Add(byte(1), "\x00\xff", []byte{0, 1}, uint64(1<<62))
	f.Add(byte(0), "x", []byte("x"), uint64(0))
	db, err := sql.Open("sqlite", sqlstore.SQLiteDSN(filepath.Join(f.TempDir(), "fuzz.db")))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = db.Close() })
	s, err := sqlstore.New(db, sqlstore.SQLite)
	if err == nil {
		err = s.Migrate(f.Context())
	}
	if err != nil {
		f.Fatal(err)
	}
	z := storagetest.NewFuzzer(s)
	f.Fuzz(func(t *testing.T, op byte, key string, value []byte, tok uint64) {
		z.Step(t, op, key, value, tok%uint64(sqlstore.MaxToken))
	})
}
