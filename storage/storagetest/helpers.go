package storagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage"
)

// valueFor returns the value the suite writes with token t: the token and a
// tag, padded to size bytes, so any record read back can be checked for
// being exactly what one write stored (not truncated, not mixed).
func valueFor(t fence.Token, tag string, size int) []byte {
	head := []byte(t.String() + "|" + tag + "|")
	if size < len(head) {
		size = len(head)
	}
	v := make([]byte, size)
	for i := range v {
		v[i] = head[i%len(head)]
	}
	return v
}

// parseValue recovers the token and tag from a value made by valueFor and
// reports whether the value is intact.
func parseValue(v []byte) (fence.Token, string, bool) {
	parts := bytes.SplitN(v, []byte("|"), 3)
	if len(parts) != 3 {
		return 0, "", false
	}
	n, err := strconv.ParseUint(string(parts[0]), 10, 64)
	if err != nil {
		return 0, "", false
	}
	tok, tag := fence.Token(n), string(parts[1])
	return tok, tag, bytes.Equal(v, valueFor(tok, tag, len(v)))
}

func mustPut(t *testing.T, s storage.Store, key string, v []byte, tok fence.Token) {
	t.Helper()
	if err := s.Put(t.Context(), key, v, tok); err != nil {
		t.Fatalf("Put(%q, %d bytes, token %d): %v", short(key), len(v), tok, err)
	}
}

func mustDelete(t *testing.T, s storage.Store, key string, tok fence.Token) {
	t.Helper()
	if err := s.Delete(t.Context(), key, tok); err != nil {
		t.Fatalf("Delete(%q, token %d): %v", short(key), tok, err)
	}
}

// expect checks key's value (nil: no value) and highest token.
func expect(t *testing.T, s storage.Store, key string, want []byte, wantTok, wantHighest fence.Token) {
	t.Helper()
	ctx := t.Context()
	rec, err := s.Get(ctx, key)
	switch {
	case want == nil:
		if !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("Get(%q) = %d bytes token %d, %v; want ErrNotFound", short(key), len(rec.Value), rec.Token, err)
		}
	case err != nil:
		t.Fatalf("Get(%q): %v", short(key), err)
	case rec.Value == nil:
		t.Fatalf("Get(%q) returned a nil Value for a found record", short(key))
	case !bytes.Equal(rec.Value, want) || rec.Token != wantTok:
		t.Fatalf("Get(%q) = %q token %d; want %q token %d", short(key), clip(rec.Value), rec.Token, clip(want), wantTok)
	}
	h, err := s.Highest(ctx, key)
	if err != nil {
		t.Fatalf("Highest(%q): %v", short(key), err)
	}
	if h != wantHighest {
		t.Fatalf("Highest(%q) = %d; want %d", short(key), h, wantHighest)
	}
}

// expectStale checks err is a *fence.StaleError for tok against highest.
func expectStale(t *testing.T, err error, tok, highest fence.Token) {
	t.Helper()
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("err = %v; want fence.ErrStale", err)
	}
	var se *fence.StaleError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v; want a *fence.StaleError in the chain", err)
	}
	if se.Token != tok || se.Highest != highest {
		t.Fatalf("StaleError{Token: %d, Highest: %d}; want {%d, %d}", se.Token, se.Highest, tok, highest)
	}
}

// short keeps failure messages readable for very long keys.
func short(key string) string {
	if len(key) > 64 {
		return fmt.Sprintf("%s...(%d bytes)", key[:32], len(key))
	}
	return key
}

func clip(v []byte) []byte {
	if len(v) > 48 {
		return v[:48]
	}
	return v
}

// cancelled returns a context that is already cancelled.
func cancelled(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}
