package lua

import (
	"fmt"
	"strings"
)

// Keys are the Redis keys and channel of one lock. All keys share the hash
// tag {name}, so every script touches a single Cluster slot.
type Keys struct {
	Name  string // N, the lock's name
	Lock  string // P:{N}, the lock hash: the counter, the holder and its lease
	Queue string // P:{N}:q, the Lock calls waiting, oldest first
}

// escaper makes a string safe inside a hash tag. Redis takes the tag from
// the first '{' to the next '}', so a '}' in a name would cut the tag short
// and an empty tag would not count as one; '%' is escaped too so that the
// mapping stays one-to-one and two names never share keys.
var escaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// HashTag returns s as a Redis Cluster hash tag: "{" + s + "}" with '%',
// '{' and '}' in s escaped as %25, %7B and %7D. Whatever s holds, the tag
// is well-formed, so every key that holds it (after a prefix free of
// braces) lands in the slot of s's escaped form; and two strings never
// share a tag. The keys of locks and of redisstore's records are built on
// it.
func HashTag(s string) string { return "{" + escaper.Replace(s) + "}" }

// KeysFor returns the keys of the lock name under prefix. It does not
// validate; callers check the name with [CheckName] and the prefix with
// [CheckPrefix] once, up front.
func KeysFor(prefix, name string) Keys {
	base := prefix + ":" + HashTag(name)
	return Keys{Name: name, Lock: base, Queue: base + ":q"}
}

// MaxNameLen is the longest lock name accepted, in bytes. Names are opaque
// bytes; the bound keeps keys, channels and logs a sane size.
const MaxNameLen = 1024

// MaxPrefixLen is the longest key prefix accepted, in bytes.
const MaxPrefixLen = 256

// CheckName reports why name cannot be a lock name, or nil. Any non-empty
// string of up to MaxNameLen bytes is a valid name, braces included.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty lock name")
	case len(name) > MaxNameLen:
		return fmt.Errorf("lock name is %d bytes, the maximum is %d", len(name), MaxNameLen)
	}
	return nil
}

// CheckPrefix reports why p cannot be a key prefix, or nil. A prefix is
// 1 to MaxPrefixLen bytes with no '{' or '}', which would move the hash tag.
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
