package storagetest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage"
)

// unusualKeys are keys an adapter's encoding could get wrong: bytes that
// terminate C strings, open or close a Redis Cluster hash tag, act as an
// escape character or a separator, and text that is not valid UTF-8.
// Several are the escaped spelling of others, so an encoding that is not
// injective makes two of them collide.
var unusualKeys = []string{
	"\x00", "a\x00b", "\x00\x00",
	"{", "}", "{}", "}{", "{a}", "a{b}c", "{{}}", "{a}{b}",
	"%", "%25", "%7B", "%7D", "%7Ba%7D", "%%",
	":", "a:b", "redfence:store:{x}", "::",
	"日本語", "🔒 lock", "\xff\xfe\xfd", "é", "e\u0301",
	" ", "\t\r\n", "'", "\"", "\\", "';--", "?", "$1",
}

// testUnusualKeys: every unusual key stores and reads back its own value,
// and no two keys share a value or a fence.
func testUnusualKeys(t *testing.T, s storage.Store, _ config) {
	for i, key := range unusualKeys {
		tok := fence.Token(i + 1)
		mustPut(t, s, key, valueFor(tok, "unusual", 0), tok)
	}
	for i, key := range unusualKeys {
		tok := fence.Token(i + 1)
		expect(t, s, key, valueFor(tok, "unusual", 0), tok, tok)
	}
	// Token 2 is fresh for every key whose fence is below it and stale for
	// the rest; a shared fence between two keys would break that.
	for i, key := range unusualKeys {
		err := s.Put(t.Context(), key, []byte("second"), 2)
		if i+1 <= 2 && err != nil {
			t.Fatalf("Put(%q, token 2) over token %d: %v", key, i+1, err)
		}
		if i+1 > 2 {
			expectStale(t, err, 2, fence.Token(i+1))
		}
	}
}

// testValues: empty, binary and 1 MiB values round-trip exactly, and the
// store keeps no reference to the caller's slices.
func testValues(t *testing.T, s storage.Store, _ config) {
	mustPut(t, s, "nil", nil, 1)
	expect(t, s, "nil", []byte{}, 1, 1)
	mustPut(t, s, "empty", []byte{}, 1)
	expect(t, s, "empty", []byte{}, 1, 1)

	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	mustPut(t, s, "binary", binary, 1)
	expect(t, s, "binary", binary, 1, 1)

	big := valueFor(2, "big", 1<<20)
	mustPut(t, s, "big", big, 2)
	expect(t, s, "big", big, 2, 2)

	// The caller may reuse its slices: neither mutating what it put nor
	// what it got back changes the store.
	v := []byte("original")
	mustPut(t, s, "alias", v, 3)
	copy(v, "XXXXXXXX")
	rec, err := s.Get(t.Context(), "alias")
	if err != nil {
		t.Fatal(err)
	}
	copy(rec.Value, "YYYYYYYY")
	expect(t, s, "alias", []byte("original"), 3, 3)
}

// testKeyLength: a key of exactly storage.MaxKeyLen bytes works for every
// method; one byte more is invalid for every method and changes nothing.
// Every adapter has this one limit, so a key that works in one store works
// in all of them.
func testKeyLength(t *testing.T, s storage.Store, _ config) {
	// Braces and escape characters make the longest key also the one whose
	// encoding grows the most.
	long := strings.Repeat("{%}", storage.MaxKeyLen/3+1)[:storage.MaxKeyLen]
	mustPut(t, s, long, []byte("long"), 1)
	expect(t, s, long, []byte("long"), 1, 1)
	mustDelete(t, s, long, 2)
	expect(t, s, long, nil, 0, 2)
	mustPut(t, s, long, []byte("long"), 3)
	expect(t, s, long, []byte("long"), 3, 3)

	expectInvalid(t, s, long+"x")
	expectInvalid(t, s, long+"}")
	expectInvalid(t, s, strings.Repeat("\xff", storage.MaxKeyLen+1))
	// Nothing was truncated onto the longest key: its record is as it was.
	expect(t, s, long, []byte("long"), 3, 3)
}

// testEmptyKey: the empty key is invalid for every method.
func testEmptyKey(t *testing.T, s storage.Store, _ config) {
	expectInvalid(t, s, "")
}

func expectInvalid(t *testing.T, s storage.Store, key string) {
	t.Helper()
	ctx := t.Context()
	checks := map[string]error{
		"Put":    s.Put(ctx, key, []byte("v"), 1),
		"Delete": s.Delete(ctx, key, 1),
	}
	_, checks["Get"] = s.Get(ctx, key)
	_, checks["Highest"] = s.Highest(ctx, key)
	for name, err := range checks {
		if !errors.Is(err, storage.ErrInvalid) {
			t.Errorf("%s(%d-byte key): %v; want storage.ErrInvalid", name, len(key), err)
		}
	}
}

// testCancelled: a call with a cancelled context fails with the context's
// error, and its cause when it has one (a lost lease's), and changes
// nothing.
func testCancelled(t *testing.T, s storage.Store, _ config) {
	mustPut(t, s, "k", []byte("v"), 5)
	lost := errors.New("lease lost: ownership gone (storagetest)")
	caused, stop := context.WithCancelCause(t.Context())
	stop(lost)
	for _, c := range []struct {
		ctx   context.Context
		cause error
	}{{cancelled(t), context.Canceled}, {caused, lost}} {
		checks := map[string]error{
			"Put":    s.Put(c.ctx, "k", []byte("new"), 6),
			"Delete": s.Delete(c.ctx, "k", 6),
		}
		_, checks["Get"] = s.Get(c.ctx, "k")
		_, checks["Highest"] = s.Highest(c.ctx, "k")
		for name, err := range checks {
			if !errors.Is(err, context.Canceled) || !errors.Is(err, c.cause) {
				t.Errorf("%s with a cancelled context: %v; want context.Canceled and %v", name, err, c.cause)
			}
		}
	}
	expect(t, s, "k", []byte("v"), 5, 5)
}

// testCancelMidCall: contexts that expire while 1 MiB writes are in flight
// leave each write either wholly applied or not at all.
func testCancelMidCall(t *testing.T, s storage.Store, _ config) {
	mustPut(t, s, "k", valueFor(1, "mid", 1<<20), 1)
	var failed, ok int
	for i := range 20 {
		tok := fence.Token(i + 2)
		v := valueFor(tok, "mid", 1<<20)
		ctx, cancel := context.WithTimeout(t.Context(), expiringTimeout(i))
		putErr := s.Put(ctx, "k", v, tok)
		cancel()
		if putErr != nil {
			if !errors.Is(putErr, context.DeadlineExceeded) && !errors.Is(putErr, context.Canceled) && !isNetTimeout(putErr) {
				t.Fatalf("Put under an expiring context: %v; want a context or timeout error", putErr)
			}
			failed++
		} else {
			ok++
		}
		rec, err := s.Get(t.Context(), "k")
		if err != nil {
			t.Fatalf("Get after an interrupted Put: %v", err)
		}
		got, _, intact := parseValue(rec.Value)
		if !intact || got != rec.Token || len(rec.Value) != 1<<20 {
			t.Fatalf("after an interrupted Put the value is not one whole write: token %d, %d bytes, intact %v", rec.Token, len(rec.Value), intact)
		}
		if putErr == nil && rec.Token != tok {
			t.Fatalf("Put with token %d succeeded but Get shows token %d", tok, rec.Token)
		}
		if !bytes.Equal(rec.Value, valueFor(rec.Token, "mid", 1<<20)) {
			t.Fatalf("value for token %d is not the one written with it", rec.Token)
		}
	}
	t.Logf("puts under expiring contexts: %d succeeded, %d failed, every one whole or absent", ok, failed)
}
