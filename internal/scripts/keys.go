package scripts

import (
	"strconv"
	"strings"

	"github.com/redfence/redfence/internal/hashslot"
)

// Keys are the Redis keys of one lock. All are in the slot of the hash tag
// {name}, so every script touches a single Cluster slot.
type Keys struct {
	Name    string // N, the lock's name
	Lock    string // P:{N}, the lock hash: the holder, its lease, the last ownership
	Queue   string // P:{N}:q, the Lock calls waiting, oldest first
	Counter string // P:{N}:t, the strict counter: the highest token issued
	// Floor is P:{S}:f, the time tokens' floor: the highest token issued
	// for any name of N's slot, where {S} is a hash tag of that slot
	// (hashslot.Tag), so that it shares the slot of N's keys; with
	// SharedKeysFor, of the slots that share N's slot modulo SharedFloors.
	// No lock name makes it: lock keys end in "}", ":q" or ":t". Its
	// record hashes (Records) end in ":r<ms>:0" and ":r<ms>:1".
	Floor string

	// boxed holds Lock, Queue, Counter and Floor as command arguments,
	// made once by KeysFor: a lock's acquire and release then box none of
	// them.
	boxed [4]any
}

// Records returns the two record hashes beside k.Floor for the record time
// of m, P:{S}:r<ms>:0 and P:{S}:r<ms>:1 (lua/lib.lua): with time tokens, a
// released name's record (its last token and owner) is a field of one of
// them for one to two record times, instead of a hash of its own. They
// share the floor's slot. Clients with different record times keep
// records apart.
func (k *Keys) Records(m Tokens) [2]string {
	base := strings.TrimSuffix(k.Floor, "f") + "r" + strconv.FormatInt(m.RecordMillis(), 10) + ":"
	return [2]string{base + "0", base + "1"}
}

// RecordField returns the field of k's record in a record hash: the lock
// key from its first "{" (the name's tag).
func (k *Keys) RecordField() string { return k.Lock[strings.IndexByte(k.Lock, '{'):] }

// Key indices for arg.
const (
	lockKey = iota
	queueKey
	counterKey
	floorKey
)

// arg returns key i (Lock, Queue, Counter, Floor) as a command argument.
func (k *Keys) arg(i int) any {
	if k.boxed[0] != nil {
		return k.boxed[i]
	}
	return [4]string{k.Lock, k.Queue, k.Counter, k.Floor}[i]
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

// SharedFloors is how many floors, each with its pair of record hashes, the
// names of one prefix share in the layout of SharedKeysFor: the slot of
// the name modulo SharedFloors picks one. A released name's record is then
// a field of a hash shared with about names/SharedFloors others, not a key
// of its own or of its slot's, which is what keeps it under 100 B.
const SharedFloors = 512

// KeysFor returns the keys of the lock name under prefix, every one of them
// in the slot of the name: the layout of a Redis Cluster, and of a server
// behind a proxy that routes by slot. It does not validate: the keys share
// one slot only for a non-empty name and a prefix free of braces. reentrant
// checks every name and prefix it is given
// ([github.com/redfence/redfence/reentrant.CheckName] and CheckPrefix).
func KeysFor(prefix, name string) Keys { return keysIn(prefix, name, hashslot.Slots) }

// SharedKeysFor returns the keys of the lock name under prefix where a
// script may touch keys of any slot (a standalone or Sentinel server, a
// Redlock node): as KeysFor, but the floor (and its record hashes) is that
// of the name's slot modulo SharedFloors, shared by every name of those
// slots, at most SharedFloors per prefix. The lock, queue and counter keys
// are KeysFor's.
func SharedKeysFor(prefix, name string) Keys { return keysIn(prefix, name, SharedFloors) }

func keysIn(prefix, name string, floors int) Keys {
	// One string holds the four keys, "P:{N}:qP:{N}:tP:{S}:f", one
	// allocation instead of four on the path of every call.
	tag := escape(name)
	// The slot of the escaped name, which holds no brace, is its CRC; the
	// tag's text is built on the stack, and the concatenation copies it.
	var buf [8]byte
	slot := hashslot.AppendTag(buf[:0], hashslot.Of(tag)%floors)
	all := prefix + ":{" + tag + "}:q" + prefix + ":{" + tag + "}:t" + prefix + ":" + string(slot) + ":f"
	base := len(prefix) + len(":{}") + len(tag)
	k := Keys{Name: name, Lock: all[:base], Queue: all[:base+2], Counter: all[base+2 : 2*base+4], Floor: all[2*base+4:]}
	k.boxed = [4]any{k.Lock, k.Queue, k.Counter, k.Floor}
	return k
}
