package scripts

import (
	"fmt"
	"strings"
)

// DefaultPrefix is the key prefix of package reentrant's locks when
// reentrant.WithPrefix gives none, and of the CLI's --prefix.
const DefaultPrefix = "redfence"

// MaxNameLen is the longest lock name, in bytes: names are opaque bytes,
// and the bound keeps keys, channels and logs a sane size.
const MaxNameLen = 1024

// MaxPrefixLen is the longest key prefix, in bytes.
const MaxPrefixLen = 256

// CheckName reports why name cannot be a lock name, or nil: any non-empty
// string of up to MaxNameLen bytes is one, braces included. Package
// reentrant checks every name so, up front (its error then wraps
// reentrant.ErrInvalid); KeysFor does not.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty lock name")
	case len(name) > MaxNameLen:
		return fmt.Errorf("lock name is %d bytes, the maximum is %d", len(name), MaxNameLen)
	}
	return nil
}

// CheckPrefix reports why p cannot be a key prefix, or nil: a prefix is 1
// to MaxPrefixLen bytes with no '{' or '}', which would move the hash tag.
// reentrant.WithPrefix checks it so.
func CheckPrefix(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty key prefix")
	case len(p) > MaxPrefixLen:
		return fmt.Errorf("key prefix is %d bytes, the maximum is %d", len(p), MaxPrefixLen)
	case strings.ContainsAny(p, "{}"):
		return fmt.Errorf("key prefix %q contains a brace, which would break the hash tag", p)
	}
	return nil
}
