package s3store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/redfence/redfence/storage"
)

var _ storage.Store = (*Store)(nil)

var (
	// ErrContended reports a call that lost to other writers
	// [WithMaxAttempts] times: a write whose object changed between its
	// read and its conditional PUT in every round (the error also holds the
	// server's last 412 or 409), or a read that found the object being
	// replaced every time it read. Such a write is not in the object: none
	// of its PUTs was applied, or (the SDK re-sent a PUT whose reply was
	// lost) one was and a newer write has replaced it since.
	ErrContended = errors.New("too many conflicting writers")

	// ErrForeign reports an object at a key's name that this package did
	// not write (no valid redfence-token metadata, or a body too short):
	// nothing was read or changed.
	ErrForeign = errors.New("object not written by s3store")
)

const (
	// DefaultPrefix is the prefix of every object name unless [WithPrefix]
	// says otherwise.
	DefaultPrefix = "redfence-store/"

	// DefaultMaxAttempts is the number of rounds (HEAD then conditional
	// PUT) a write makes before it gives up with [ErrContended], unless
	// [WithMaxAttempts] says otherwise.
	DefaultMaxAttempts = 32

	// hashLen is the length of the hex SHA-256 that follows the prefix.
	hashLen = 2 * sha256.Size
	// maxNameLen is S3's limit on an object name, in bytes of UTF-8.
	maxNameLen = 1024
)

// Store is a [storage.Store] in an S3 bucket. It is safe for concurrent use
// by multiple goroutines and, sharing one bucket and prefix, by multiple
// processes. A Store holds no state besides its configuration and may be
// copied.
type Store struct {
	c      *s3.Client
	bucket string
	cfg    config
}

// Option configures a Store, given to [New]; a bad value is refused there.
type Option func(*config) error

type config struct {
	prefix      string
	maxAttempts int

	// Test-only (export_test.go): unconditional makes writes plain PUTs,
	// the planted fault the conformance suite must catch; attempts, if
	// set, is told how many rounds each accepted or refused write made.
	unconditional bool
	attempts      func(n int)
}

// WithPrefix sets the prefix of every object name. The default is
// [DefaultPrefix]; the empty prefix is allowed. It must be valid UTF-8 and
// leave room for the 64 hex digits of the hash within S3's 1,024 bytes (at
// most 960 bytes); [New] refuses it otherwise, with an error wrapping
// storage.ErrInvalid. Stores on one bucket with different prefixes (neither
// of which is a prefix of a name under the other) are independent.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if !utf8.ValidString(prefix) || len(prefix) > maxNameLen-hashLen {
			return fmt.Errorf("s3store: prefix of %d bytes must be UTF-8 of at most %d: %w",
				len(prefix), maxNameLen-hashLen, storage.ErrInvalid)
		}
		c.prefix = prefix
		return nil
	}
}

// WithMaxAttempts sets how many rounds, each a HEAD and a conditional PUT,
// a write makes while other writers keep changing the object between its
// read and its write. The default is [DefaultMaxAttempts]. Past it the write
// fails with [ErrContended]. It also bounds Get's re-reads of a torn
// object and the HEADs that confirm a torn one (at least two). n must be at least 1;
// [New] refuses it otherwise, with an error wrapping storage.ErrInvalid.
func WithMaxAttempts(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("s3store: max attempts %d must be at least 1: %w", n, storage.ErrInvalid)
		}
		c.maxAttempts = n
		return nil
	}
}

// New returns a Store on bucket through c. The client is the caller's: its
// endpoint, region, credentials, addressing style, retries and HTTP client
// are used as they are. New makes no request; the bucket must exist, and
// the server must honour If-Match and If-None-Match on PUT (AWS S3 does,
// since 2024; so do MinIO and versitygw). New returns an error wrapping
// storage.ErrInvalid for a nil client, an empty bucket, a nil option or a
// bad option value.
func New(c *s3.Client, bucket string, opts ...Option) (*Store, error) {
	if c == nil {
		return nil, fmt.Errorf("s3store: nil client: %w", storage.ErrInvalid)
	}
	if bucket == "" {
		return nil, fmt.Errorf("s3store: empty bucket name: %w", storage.ErrInvalid)
	}
	cfg := config{prefix: DefaultPrefix, maxAttempts: DefaultMaxAttempts}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("s3store: nil option: %w", storage.ErrInvalid)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return &Store{c: c, bucket: bucket, cfg: cfg}, nil
}

// ObjectName returns the name of the object that holds key's record,
// prefix followed by the lower-case hex SHA-256 of the key's bytes, for
// inspection, debugging and migration. Two keys never share an object
// (short of a SHA-256 collision). It returns an error wrapping
// storage.ErrInvalid for a key that storage.CheckKey refuses.
func (s *Store) ObjectName(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	return s.name(key), nil
}

func (s *Store) name(key string) string {
	sum := sha256.Sum256([]byte(key))
	return s.cfg.prefix + hex.EncodeToString(sum[:])
}

// checkKey applies the one key rule of package storage.
func checkKey(key string) error {
	if err := storage.CheckKey(key); err != nil {
		return fmt.Errorf("s3store: %w", err)
	}
	return nil
}
