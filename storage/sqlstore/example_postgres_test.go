package sqlstore_test

import (
	"bytes"
	"context"
	"io"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/redfence/redfence/internal/testkit/testenv"
)

// TestExampleStoreGuardPostgres runs ExampleStore_Guard, which go test only
// compiles (it has no Output comment, since it needs a server), against the
// PostgreSQL of REDFENCE_POSTGRES_URL, and checks what it prints. The
// example gets a fresh schema of its own through the URL's search_path, so
// its tables start empty and nothing else sees them.
func TestExampleStoreGuardPostgres(t *testing.T) {
	base := testenv.PostgresURL(t)
	db := openPostgres(t)
	schema := "rf_example_" + strings.TrimPrefix(uniqueTable(), "rf_test_")
	if _, err := db.ExecContext(t.Context(), `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := db.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s: %v", testenv.PostgresURLVar, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	t.Setenv(testenv.PostgresURLVar, u.String())

	got := stdoutOf(t, ExampleStore_Guard)
	want := `B: <nil>
A: stale: true
balance: 150
`
	if got != want {
		t.Errorf("ExampleStore_Guard printed:\n%s\nwant:\n%s", got, want)
	}
}

// stdoutOf returns what f prints to os.Stdout.
func stdoutOf(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = saved }()
	read := make(chan []byte)
	go func() {
		var b bytes.Buffer
		_, _ = io.Copy(&b, r)
		read <- b.Bytes()
	}()
	f()
	_ = w.Close()
	out := <-read
	_ = r.Close()
	return string(out)
}
