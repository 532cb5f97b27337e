package scripts

import (
	"strings"

	"github.com/redfence/redfence/internal/hashslot"
)

// Keys are the Redis keys of one lock, all in the slot of the hash tag
// {name}, so every script touches a single Cluster slot (lua/lib.lua).
type Keys struct {
	Name    string // N, the lock's name
	Lock    string // P:{N}, the hold: a hash that exists only while the lock is held, its expiry the lease
	Queue   string // P:{N}:q, the Lock calls waiting, oldest first
	Counter string // P:{N}:t, the strict counter: the highest token issued for N
	Forced  string // P:{N}:u, the record of a forced unlock, while the forced lease would have lasted
	// Floor is P:{S}:f, the time tokens' floor: the highest token issued
	// for any name of N's slot, where {S} is a hash tag of that slot
	// (hashslot.Tag), in the slot itself. No lock name makes it: a lock's
	// keys end in "}", ":q", ":t" or ":u".
	Floor string

	// Kind is 0 for a lock's keys; for a read-write lock's or a
	// semaphore's (SharedKeys), the kind of hold they address: 'r' (a
	// reader), 'w' (the writer) or 's' (a permit). Lock is then that
	// hold's key, and the wrappers run the shared scripts.
	Kind byte
	// Base is a shared lock's base key, which its scripts name the others
	// from, and Index its holders (lua/shared.lua).
	Base, Index string

	// args holds the keys as command arguments, made once by KeysFor in
	// one allocation: a string put in an interface is an allocation of its
	// own, an *arg is not, so a lock's calls box none of them.
	args *[5]arg
}

// Key indices for arg.
const (
	lockKey = iota
	queueKey
	counterKey
	floorKey
	forcedKey
)

// arg returns key i (Lock, Queue, Counter, Floor, Forced) as a command
// argument.
func (k *Keys) arg(i int) any {
	if k.args != nil {
		return &k.args[i]
	}
	return [5]string{k.Lock, k.Queue, k.Counter, k.Floor, k.Forced}[i]
}

// counter returns, as a command argument, the key that holds the counter
// for tokens issued in mode m: the floor with time tokens, the name's own
// counter in strict mode.
func (k *Keys) counter(m Tokens) any {
	if m.Time {
		return k.arg(floorKey)
	}
	return k.arg(counterKey)
}

// other returns, as a command argument, the key of the token mode other
// than m's, which the scripts refuse to find (lua/lib.lua, otherMode).
func (k *Keys) other(m Tokens) any {
	if m.Time {
		return k.arg(counterKey)
	}
	return k.arg(floorKey)
}

// escaper makes a string safe inside a hash tag. Redis takes the tag from
// the first '{' to the next '}', so a '}' in a name would cut the tag short
// and an empty tag would not count as one; '%' is escaped too so that the
// mapping stays one-to-one and two names never share keys.
var escaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// HashTag returns s as a Redis Cluster hash tag: "{" + s + "}" with '%',
// '{' and '}' in s escaped as %25, %7B and %7D. Whatever a non-empty s
// holds, the tag is well-formed, so every key that holds it after a prefix
// free of braces lands in the slot of s's escaped form; and two strings
// never share a tag. The keys of locks and of redisstore's records are
// built on it.
func HashTag(s string) string { return "{" + escape(s) + "}" }

// escape is escaper.Replace, without its work for the common name that
// holds none of '%', '{' and '}'.
func escape(s string) string {
	if !strings.ContainsAny(s, "%{}") {
		return s
	}
	return escaper.Replace(s)
}

// KeysFor returns the keys of the lock name under prefix, every one of them
// in the slot of the name. It does not validate: the keys share one slot
// only for a non-empty name and a prefix free of braces. reentrant checks
// every name and prefix it is given
// (CheckName and CheckPrefix).
func KeysFor(prefix, name string) Keys {
	// One string holds the five keys, "P:{N}:qP:{N}:tP:{N}:uP:{S}:f", one
	// allocation instead of five on the path of every call.
	tag := escape(name)
	// The slot of the escaped name, which holds no brace, is its CRC; the
	// tag's text is built on the stack, and the concatenation copies it.
	var buf [8]byte
	slot := hashslot.AppendTag(buf[:0], hashslot.Of(tag))
	all := prefix + ":{" + tag + "}:q" + prefix + ":{" + tag + "}:t" + prefix + ":{" + tag + "}:u" +
		prefix + ":" + string(slot) + ":f"
	b := len(prefix) + len(":{}") + len(tag)
	k := Keys{Name: name, Lock: all[:b], Queue: all[:b+2], Counter: all[b+2 : 2*b+4], Forced: all[2*b+4 : 3*b+6],
		Floor: all[3*b+6:]}
	k.args = &[5]arg{argOf(k.Lock), argOf(k.Queue), argOf(k.Counter), argOf(k.Floor), argOf(k.Forced)}
	return k
}
