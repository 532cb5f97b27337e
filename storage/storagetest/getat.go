package storagetest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testkit/phrase"
	"github.com/redfence/redfence/storage"
)

// testGetAt: storage.GetAt on the adapter returns a record written at or
// below the reader's epoch, refuses one written above it (and a value
// deleted above it) as stale with both tokens, reports a key never written,
// or deleted at or below the epoch, as not found, and treats epoch None as
// "every record is newer". It reads the tokens the adapter's Get and
// Highest return, so it checks those as a reader relies on them.
func testGetAt(t *testing.T, s storage.Store, c config) {
	const p53 = fence.Token(1) << 53

	expectReadNotFound(t, s, "never", fence.None)
	expectReadNotFound(t, s, "never", 5)

	mustPut(t, s, "k", []byte("v5"), 5)
	expectRead(t, s, "k", 5, []byte("v5"), 5)
	expectRead(t, s, "k", 6, []byte("v5"), 5)
	expectRead(t, s, "k", c.maxToken, []byte("v5"), 5)
	expectReadStale(t, s, "k", 4, 5)
	expectReadStale(t, s, "k", 1, 5)
	expectReadStale(t, s, "k", fence.None, 5)

	// The holder of the epoch's token writes again: still at the epoch.
	mustPut(t, s, "k", []byte("again"), 5)
	expectRead(t, s, "k", 5, []byte("again"), 5)

	// A newer writer deletes: stale below its token, absent from it on.
	mustDelete(t, s, "k", 8)
	expectReadStale(t, s, "k", 5, 8)
	expectReadStale(t, s, "k", 7, 8)
	expectReadStale(t, s, "k", fence.None, 8)
	expectReadNotFound(t, s, "k", 8)
	expectReadNotFound(t, s, "k", 9)

	// And a newer one writes again.
	mustPut(t, s, "k", []byte("v9"), 9)
	expectReadStale(t, s, "k", 8, 9)
	expectRead(t, s, "k", 9, []byte("v9"), 9)

	// A Delete of a key never written still fences older readers.
	mustDelete(t, s, "tomb", 4)
	expectReadStale(t, s, "tomb", 3, 4)
	expectReadNotFound(t, s, "tomb", 4)

	// A high token on one key does not make another's reader stale.
	mustPut(t, s, "other", []byte("v100"), 100)
	expectRead(t, s, "k", 9, []byte("v9"), 9)
	expectReadStale(t, s, "other", 9, 100)

	// Tokens compare exactly, above 2^53 and at the adapter's maximum.
	mustPut(t, s, "float", []byte("hi"), p53+1)
	expectReadStale(t, s, "float", p53, p53+1)
	expectRead(t, s, "float", p53+1, []byte("hi"), p53+1)
	mustPut(t, s, "max", []byte("max"), c.maxToken)
	expectReadStale(t, s, "max", c.maxToken-1, c.maxToken)
	expectRead(t, s, "max", c.maxToken, []byte("max"), c.maxToken)
}

// expectRead checks GetAt returns key's record, want written with tok, to
// a reader of epoch.
func expectRead(t *testing.T, s storage.Store, key string, epoch fence.Token, want []byte, tok fence.Token) {
	t.Helper()
	rec, err := storage.GetAt(t.Context(), s, key, epoch)
	switch {
	case err != nil:
		t.Fatalf("GetAt(%q, epoch %d): %v; want %q token %d", short(key), epoch, err, clip(want), tok)
	case rec.Value == nil:
		t.Fatalf("GetAt(%q, epoch %d) returned a nil Value for a found record", short(key), epoch)
	case !bytes.Equal(rec.Value, want) || rec.Token != tok:
		t.Fatalf("GetAt(%q, epoch %d) = %q token %d; want %q token %d", short(key), epoch, clip(rec.Value), rec.Token, clip(want), tok)
	}
}

// expectReadNotFound checks GetAt reports key absent to a reader of epoch,
// as Get does, and not stale.
func expectReadNotFound(t *testing.T, s storage.Store, key string, epoch fence.Token) {
	t.Helper()
	rec, err := storage.GetAt(t.Context(), s, key, epoch)
	if !errors.Is(err, storage.ErrNotFound) || errors.Is(err, fence.ErrStale) {
		t.Fatalf("GetAt(%q, epoch %d) = %d bytes token %d, %v; want ErrNotFound, not stale", short(key), epoch, len(rec.Value), rec.Token, err)
	}
}

// expectReadStale checks GetAt refuses key to a reader of epoch with a
// *fence.StaleError of epoch and newer, the token that wrote or deleted
// key, in a message that says a newer writer wrote since the reader's
// epoch and gives both tokens, once.
func expectReadStale(t *testing.T, s storage.Store, key string, epoch, newer fence.Token) {
	t.Helper()
	rec, err := storage.GetAt(t.Context(), s, key, epoch)
	if err == nil {
		t.Fatalf("GetAt(%q, epoch %d) = %q token %d; want fence.ErrStale (written with %d)", short(key), epoch, clip(rec.Value), rec.Token, newer)
	}
	expectStale(t, err, epoch, newer)
	if errors.Is(err, storage.ErrNotFound) {
		t.Errorf("GetAt(%q, epoch %d): %v also matches storage.ErrNotFound", short(key), epoch, err)
	}
	msg := err.Error()
	for _, want := range []string{"newer writer", "reader's epoch", fmt.Sprint(epoch), fmt.Sprint(newer)} {
		if !strings.Contains(msg, want) {
			t.Errorf("GetAt(%q, epoch %d): %q does not say %q", short(key), epoch, msg, want)
		}
	}
	if p := phrase.Repeated(msg, 4); p != "" {
		t.Errorf("GetAt(%q, epoch %d): %q says %q twice", short(key), epoch, msg, p)
	}
}
