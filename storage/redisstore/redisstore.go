// Package redisstore is a fenced store kept in Redis.
//
// Each key is one Redis hash, "<prefix>:{<escaped key>}:rec", holding the
// value, the token that wrote it and the highest token ever accepted for
// the key. A write is checked and applied by one Lua script, which Redis runs
// atomically: two writers can never both pass the check against the same
// old highest token. Delete removes the value and keeps the highest token,
// so a paused writer's late Put is still refused.
//
// The key sits inside a Redis Cluster hash tag with '%', '{' and '}'
// escaped (as %25, %7B, %7D, the tag of lock names too), so
// any key, braces included, maps to one well-formed tag and every script
// touches a single slot. The escaping is injective: two different keys never
// share a record.
//
// The ":rec" suffix keeps records apart from the keys of redfence's locks
// whatever prefixes and names are chosen, even a store prefix equal to the
// lock client's and a key equal to a lock name. A lock's keys are
// "<prefix>:{<escaped name>}" followed by nothing (the lock hash), ":t" (its counter) or ":q"
// (its wait queue). Neither kind of prefix may hold a brace and escaped
// names and keys hold none, so the first '}' of any of these keys ends its
// tag, and what follows it tells a record from every lock key. A record
// still shares the Cluster slot of the lock of the same name.
//
// Data written by versions before the ":rec" suffix, at
// "<prefix>:{<escaped key>}", is not read: such a record is invisible to
// this version, which starts that key afresh (no value, no highest token).
// Migrate it (RENAME each old key to its new name, see [Store.Key]) before
// switching, or the old fences are lost.
//
// Retries: go-redis re-sends a command after a read timeout even though
// Redis may already have run it. Re-running a write is harmless: its token
// equals the highest it recorded, so it is accepted again and writes the
// same fields. If a higher token was accepted in between, the retry reports
// fence.ErrStale, which is also the truth the caller needs: its value is no
// longer the current one. It is not "nothing was written", though: the first
// attempt was applied and then superseded. Build the client with
// MaxRetries: -1 where ErrStale must mean "never applied"; a lost reply then
// surfaces as an error of unknown outcome.
package redisstore

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/storage"
)

var _ storage.Store = (*Store)(nil)

// ErrForeign reports a record's Redis key holding something this package
// did not write (a string, a list, a hash with other fields): nothing was
// read or changed. It is the error redfence's lock scripts refuse their
// keys with, reentrant.ErrForeign, so either may be tested.
var ErrForeign = scripts.ErrForeign

// DefaultPrefix is the key prefix used unless [WithPrefix] says otherwise.
// Keys are limited to storage.MaxKeyLen bytes, as in every adapter;
// escaping can triple a key's length inside Redis, which stays far below
// Redis's own limit.
const DefaultPrefix = "redfence:store"

// Store is a [storage.Store] in Redis. It is safe for concurrent use by
// multiple goroutines and, sharing one Redis, by multiple processes. A Store
// holds no state of its own besides its configuration and may be copied.
type Store struct {
	c      redis.Scripter
	prefix string
}

// Option configures a Store, given to [New]; a bad value is refused there.
type Option func(*config) error

type config struct{ prefix string }

// WithPrefix sets the prefix of every Redis key the Store uses. The default
// is [DefaultPrefix]. A prefix must be non-empty and must not contain '{'
// or '}', which would move the Cluster hash tag; [New] refuses it otherwise,
// with an error wrapping storage.ErrInvalid. It may equal the prefix of
// redfence's locks: a record never shares a key with a lock (see the
// package documentation).
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if prefix == "" || strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("redisstore: prefix %q must be non-empty and free of braces: %w", prefix, storage.ErrInvalid)
		}
		c.prefix = prefix
		return nil
	}
}

// New returns a Store on c, which may be a *redis.Client, *redis.ClusterClient,
// redis.UniversalClient or anything else that runs scripts. The Store only
// runs scripts (EVALSHA, falling back to EVAL on NOSCRIPT), so a SCRIPT FLUSH
// or a failover to a server without the scripts cached is harmless.
// New returns an error wrapping storage.ErrInvalid for a nil client, a nil
// option or a bad prefix. The caller owns c and closes it.
func New(c redis.Scripter, opts ...Option) (*Store, error) {
	if c == nil {
		return nil, fmt.Errorf("redisstore: nil client: %w", storage.ErrInvalid)
	}
	cfg := config{prefix: DefaultPrefix}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("redisstore: nil option: %w", storage.ErrInvalid)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return &Store{c: c, prefix: cfg.prefix}, nil
}

// recordSuffix follows the hash tag of every record. A lock's keys end
// their tag with "", ":t" or ":q" (lua/lib.lua);
// without a suffix of its own a record would be the very key of the lock
// hash when prefixes and names coincide, and taking the lock would wipe it.
const recordSuffix = ":rec"

// Key returns the Redis key that holds key's record,
// "<prefix>:{<escaped key>}:rec", for inspection, debugging and migration.
// It returns an error wrapping storage.ErrInvalid for a key that
// storage.CheckKey refuses: empty, or longer than storage.MaxKeyLen.
func (s *Store) Key(key string) (string, error) {
	if err := storage.CheckKey(key); err != nil {
		return "", fmt.Errorf("redisstore: %w", err)
	}
	return s.prefix + ":" + scripts.HashTag(key) + recordSuffix, nil
}
