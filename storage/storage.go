// Package storage defines the fenced store: a key-value store that refuses
// writes carrying a fencing token older than the highest it has accepted for
// that key.
//
// Every adapter (storage/memory, storage/redisstore, storage/sqlstore)
// implements [Store] with the same rule, taken from [fence.Check], and runs
// the same conformance suite, storage/storagetest:
//
//   - A write (Put or Delete) with token t on key k is accepted iff t != 0
//     and t >= the highest token accepted for k so far. Equal is accepted:
//     one lock holder writes many times under one token.
//   - The comparison and the write happen in one atomic step, so two
//     writers can never both pass the check against the same old highest.
//   - An accepted write raises k's highest token to t. Delete removes the
//     value but keeps the highest token, so a stale Put after a Delete is
//     still refused.
//   - A refused write changes nothing and returns an error for which
//     errors.Is(err, fence.ErrStale) holds. (One exception, in the Redis
//     store with a go-redis client that retries: an attempt applied whose
//     reply was lost, re-sent after a higher token got in, reports
//     ErrStale; see package redisstore.) The zero token is refused with
//     fence.ErrNoToken; it never means "unfenced".
//
// Keys are non-empty strings of arbitrary bytes, at most [MaxKeyLen] bytes
// long in every adapter; [CheckKey] is the one check they all apply, and a
// key it refuses is an error wrapping [ErrInvalid] from every method. A
// token an adapter cannot represent is refused with ErrInvalid too.
// Nothing is silently truncated or clamped.
// A call whose context ends returns an error for which errors.Is with the
// context's error holds, and with its cause (context.Cause) when it has one
// of its own: a write refused because a lease's context ended says why the
// lease ended. After such an error, or a backend error, a write was applied
// whole or not at all.
package storage

import (
	"context"
	"errors"

	"github.com/redfence/redfence/fence"
)

var (
	// ErrNotFound reports that a key has no value: it was never written or
	// its value was deleted.
	ErrNotFound = errors.New("storage: not found")

	// ErrInvalid reports a bad argument: an empty or over-long key, a value
	// over the adapter's limit, a nil client or database.
	ErrInvalid = errors.New("storage: invalid argument")
)

// Record is a stored value and the token of the write that stored it.
type Record struct {
	Value []byte      // never nil for a found record; may be empty
	Token fence.Token // the token the value was written with
}

// Store is a fenced key-value store. Implementations are safe for
// concurrent use by multiple goroutines, and, for the networked adapters,
// by multiple processes sharing the backend.
type Store interface {
	// Get returns key's current value and the token that wrote it, or an
	// error wrapping ErrNotFound if it has none.
	Get(ctx context.Context, key string) (Record, error)

	// Put stores value under key if token passes the fencing rule, and
	// raises key's highest token to token in the same atomic step.
	// It returns an error wrapping fence.ErrStale or fence.ErrNoToken when
	// the rule refuses the write, in which case nothing changed.
	Put(ctx context.Context, key string, value []byte, token fence.Token) error

	// Delete removes key's value if token passes the fencing rule, keeping
	// token as key's highest so older writers stay fenced out. Deleting a
	// key with no value is accepted and still records the token.
	Delete(ctx context.Context, key string, token fence.Token) error

	// Highest returns the highest token accepted for key, or fence.None if
	// no write was ever accepted.
	Highest(ctx context.Context, key string) (fence.Token, error)
}
