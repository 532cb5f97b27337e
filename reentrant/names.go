package reentrant

import "strings"

// MaxNameLen is the longest lock name accepted, in bytes. Names are opaque
// bytes; the bound keeps keys, channels and logs a sane size.
const MaxNameLen = 1024

// MaxPrefixLen is the longest key prefix accepted, in bytes.
const MaxPrefixLen = 256

// CheckName reports why name cannot be a lock name (an error wrapping
// [ErrInvalid]), or nil. Any non-empty
// string of up to MaxNameLen bytes is a valid name, braces included. Every
// call of this package that takes a name checks it so, up front; scripts.KeysFor,
// which builds the keys, does not.
func CheckName(name string) error { return pkgErr("", checkName(name)) }

func checkName(name string) error {
	switch {
	case name == "":
		return invalid("empty lock name")
	case len(name) > MaxNameLen:
		return invalid("lock name is %d bytes, the maximum is %d", len(name), MaxNameLen)
	}
	return nil
}

// CheckPrefix reports why p cannot be a key prefix (an error wrapping
// [ErrInvalid]), or nil. A prefix is
// 1 to MaxPrefixLen bytes with no '{' or '}', which would move the hash tag.
// [WithPrefix] checks it so.
func CheckPrefix(p string) error { return pkgErr("", checkPrefix(p)) }

func checkPrefix(p string) error {
	switch {
	case p == "":
		return invalid("empty key prefix")
	case len(p) > MaxPrefixLen:
		return invalid("key prefix is %d bytes, the maximum is %d", len(p), MaxPrefixLen)
	case strings.ContainsAny(p, "{}"):
		return invalid("key prefix %q contains a brace, which would break the hash tag", p)
	}
	return nil
}
