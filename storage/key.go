package storage

import "fmt"

// MaxKeyLen is the longest key, in bytes, that every adapter accepts; every
// adapter refuses a longer key with [ErrInvalid], so a key that works in one
// store works in all of them.
//
// The bound is what the most constrained backend holds with room to spare:
// PostgreSQL refuses B-tree index entries over about 2.7 KB (a third of a
// page), and sqlstore's key is its table's primary key. In Redis, escaping
// can triple a key, which stays far below Redis's own limit. It is also the
// longest lock name (reentrant.MaxNameLen), so a lock's name can always serve as
// the key of the resource it guards.
const MaxKeyLen = 1024

// CheckKey reports whether key can be a key: any non-empty string of at most
// [MaxKeyLen] bytes, whatever the bytes (NUL, braces and invalid UTF-8
// included). It returns nil, or an error wrapping [ErrInvalid]. Every
// adapter calls it before anything else, on every method.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key of %d bytes exceeds the maximum of %d", ErrInvalid, len(key), MaxKeyLen)
	}
	return nil
}
