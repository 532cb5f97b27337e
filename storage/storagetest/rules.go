package storagetest

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage"
)

// testEmpty: a key never written has no value and highest token None.
func testEmpty(t *testing.T, s storage.Store, _ config) {
	expect(t, s, "never-written", nil, 0, fence.None)
}

// testSequential: increasing tokens are all accepted, each replacing the
// value and raising the highest token.
func testSequential(t *testing.T, s storage.Store, _ config) {
	for _, tok := range []fence.Token{1, 2, 3, 10, 11, 1000} {
		v := valueFor(tok, "seq", 16)
		mustPut(t, s, "k", v, tok)
		expect(t, s, "k", v, tok, tok)
	}
}

// testEqual: one holder writes many times under one token.
func testEqual(t *testing.T, s storage.Store, _ config) {
	mustPut(t, s, "k", []byte("first"), 7)
	mustPut(t, s, "k", []byte("second"), 7)
	expect(t, s, "k", []byte("second"), 7, 7)
	mustDelete(t, s, "k", 7)
	expect(t, s, "k", nil, 0, 7)
	mustPut(t, s, "k", []byte("third"), 7)
	expect(t, s, "k", []byte("third"), 7, 7)
}

// testLower: a lower token is refused with a *fence.StaleError naming both
// tokens, and neither the value nor the highest token changes.
func testLower(t *testing.T, s storage.Store, _ config) {
	mustPut(t, s, "k", []byte("current"), 20)
	for _, tok := range []fence.Token{19, 2, 1} {
		expectStale(t, s.Put(t.Context(), "k", []byte("late"), tok), tok, 20)
		expect(t, s, "k", []byte("current"), 20, 20)
		expectStale(t, s.Delete(t.Context(), "k", tok), tok, 20)
		expect(t, s, "k", []byte("current"), 20, 20)
	}
}

// testZero: the zero token is refused on a new and on an existing key; it
// never means "unfenced".
func testZero(t *testing.T, s storage.Store, _ config) {
	ctx := t.Context()
	if err := s.Put(ctx, "new", []byte("x"), fence.None); !errors.Is(err, fence.ErrNoToken) {
		t.Fatalf("Put with zero token on a new key: %v; want fence.ErrNoToken", err)
	}
	expect(t, s, "new", nil, 0, fence.None)
	mustPut(t, s, "k", []byte("v"), 3)
	if err := s.Put(ctx, "k", []byte("x"), fence.None); !errors.Is(err, fence.ErrNoToken) {
		t.Fatalf("Put with zero token: %v; want fence.ErrNoToken", err)
	}
	if err := s.Delete(ctx, "k", fence.None); !errors.Is(err, fence.ErrNoToken) {
		t.Fatalf("Delete with zero token: %v; want fence.ErrNoToken", err)
	}
	expect(t, s, "k", []byte("v"), 3, 3)
}

// testDeleteKeepsFence: Delete removes the value, keeps (and raises) the
// highest token, and a stale Put after it is refused.
func testDeleteKeepsFence(t *testing.T, s storage.Store, _ config) {
	mustPut(t, s, "k", []byte("v"), 5)
	mustDelete(t, s, "k", 8)
	expect(t, s, "k", nil, 0, 8)
	expectStale(t, s.Put(t.Context(), "k", []byte("zombie"), 6), 6, 8)
	expect(t, s, "k", nil, 0, 8)
	mustPut(t, s, "k", []byte("back"), 9)
	expect(t, s, "k", []byte("back"), 9, 9)
}

// testDeleteAbsent: deleting a key with no value is accepted and records
// the token.
func testDeleteAbsent(t *testing.T, s storage.Store, _ config) {
	mustDelete(t, s, "k", 4)
	expect(t, s, "k", nil, 0, 4)
	expectStale(t, s.Put(t.Context(), "k", []byte("v"), 3), 3, 4)
	expect(t, s, "k", nil, 0, 4)
}

// testTokenRange: tokens are compared exactly across the range, including
// above 2^53 where a float comparison would call neighbours equal, up to
// the adapter's maximum; above it a token is invalid, never clamped.
func testTokenRange(t *testing.T, s storage.Store, c config) {
	ctx := t.Context()
	const p53 = fence.Token(1) << 53
	mustPut(t, s, "float", []byte("hi"), p53+1)
	expectStale(t, s.Put(ctx, "float", []byte("lo"), p53), p53, p53+1)
	expect(t, s, "float", []byte("hi"), p53+1, p53+1)

	mustPut(t, s, "max", []byte("9"), 9)
	mustPut(t, s, "max", []byte("max"), c.maxToken)
	expect(t, s, "max", []byte("max"), c.maxToken, c.maxToken)
	expectStale(t, s.Put(ctx, "max", []byte("lower"), c.maxToken-1), c.maxToken-1, c.maxToken)

	if c.maxToken == math.MaxUint64 {
		return
	}
	over := c.maxToken + 1
	if err := s.Put(ctx, "over", []byte("x"), over); !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("Put with token %d over the maximum %d: %v; want storage.ErrInvalid", over, c.maxToken, err)
	}
	if err := s.Delete(ctx, "over", over); !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("Delete with token %d over the maximum %d: %v; want storage.ErrInvalid", over, c.maxToken, err)
	}
	expect(t, s, "over", nil, 0, fence.None)
}

// testIndependentKeys: each key has its own fence; a high token on one key
// does not fence another.
func testIndependentKeys(t *testing.T, s storage.Store, _ config) {
	const n = 50
	for i := range n {
		key := fmt.Sprintf("key-%d", i)
		mustPut(t, s, key, valueFor(fence.Token(100-i), key, 0), fence.Token(100-i))
	}
	for i := range n {
		key := fmt.Sprintf("key-%d", i)
		tok := fence.Token(100 - i)
		expect(t, s, key, valueFor(tok, key, 0), tok, tok)
	}
	// key-0 is at 100, key-49 at 51: token 60 is stale for one, fresh for the other.
	expectStale(t, s.Put(t.Context(), "key-0", []byte("x"), 60), 60, 100)
	mustPut(t, s, "key-49", []byte("x"), 60)
	expect(t, s, "key-0", valueFor(100, "key-0", 0), 100, 100)
	expect(t, s, "key-49", []byte("x"), 60, 60)
}
