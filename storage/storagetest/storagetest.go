// Package storagetest is the conformance suite every fenced store runs.
//
// An adapter's test calls [Run] with a constructor that returns a fresh,
// empty store for each subtest. The suite checks the fencing rule of
// package storage (sequential, equal, lower and zero tokens, Delete keeping
// the fence), the fenced read storage.GetAt on the adapter's tokens, key
// and value edge cases, concurrent writers and readers against a
// linearizability oracle, cancelled contexts, and, when the adapter
// supplies a [Fault], a backend that breaks in the middle of calls.
//
// The key limit is not an option: every adapter must accept keys of up to
// storage.MaxKeyLen bytes and refuse longer ones with storage.ErrInvalid,
// so that a key that works in one store works in all of them.
//
// [Concurrent] is the concurrency check on its own, for adapters that want
// to run it larger or with one connection per writer.
package storagetest

import (
	"math"
	"testing"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage"
)

// Fault is a store whose backend a test can break on purpose.
type Fault struct {
	// Store is the store the suite writes through when it breaks.
	Store storage.Store

	// Break closes the store's client or makes its backend unreachable.
	// The suite calls it once, from its own goroutine, while other
	// goroutines have calls in flight. Every call made through Store
	// after Break returns must fail.
	Break func()

	// Reopen returns a working store on the same data, so the suite can
	// check what the interrupted calls left behind. It is called after
	// Break and after every in-flight call has returned.
	Reopen func(t *testing.T) storage.Store
}

// Option configures [Run].
type Option func(*config)

type config struct {
	maxToken fence.Token
	writers  int
	writes   int
	fault    func(t *testing.T) Fault
}

// WithMaxToken tells the suite the highest token the adapter can store: the
// suite checks max works and, if max is below the largest uint64, that max+1
// fails with storage.ErrInvalid. The default is math.MaxUint64.
func WithMaxToken(max fence.Token) Option { return func(c *config) { c.maxToken = max } }

// WithConcurrency sets the size of the concurrent-writers test: writers
// goroutines each making writes Puts. The default is 8 writers of 100 writes.
func WithConcurrency(writers, writes int) Option {
	return func(c *config) { c.writers, c.writes = writers, writes }
}

// WithFault supplies the constructor for the broken-backend test. Without
// it that test skips, saying so.
func WithFault(newFault func(t *testing.T) Fault) Option {
	return func(c *config) { c.fault = newFault }
}

// Run runs the conformance suite, one subtest per property. newStore is
// called once per subtest and must return an empty store that no other
// subtest shares; it may register its own cleanup with t.Cleanup. Every
// error the store returns to a subtest is also checked for a phrase of four
// words said twice (a wrapped error repeating its cause), which fails it.
func Run(t *testing.T, newStore func(t *testing.T) storage.Store, opts ...Option) {
	t.Helper()
	c := config{maxToken: math.MaxUint64, writers: 8, writes: 100}
	for _, o := range opts {
		o(&c)
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s storage.Store, c config)
	}{
		{"Empty", testEmpty},
		{"Sequential", testSequential},
		{"EqualToken", testEqual},
		{"LowerToken", testLower},
		{"ZeroToken", testZero},
		{"DeleteKeepsFence", testDeleteKeepsFence},
		{"DeleteAbsent", testDeleteAbsent},
		{"GetAt", testGetAt},
		{"TokenRange", testTokenRange},
		{"IndependentKeys", testIndependentKeys},
		{"Values", testValues},
		{"UnusualKeys", testUnusualKeys},
		{"KeyLength", testKeyLength},
		{"EmptyKey", testEmptyKey},
		{"CancelledContext", testCancelled},
		{"CancelMidCall", testCancelMidCall},
		{"Concurrent", testConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, phraseChecked{newStore(t), t.Errorf}, c) })
	}
	// An adapter with no backend to break (memory) has no such subtest,
	// rather than a skip: in CI a skipped test reads as a missing server.
	if c.fault != nil {
		t.Run("BrokenBackend", func(t *testing.T) { testBroken(t, c.fault(t)) })
	}
}
