package testenv

import (
	"strconv"
	"strings"

	"github.com/redfence/redfence/internal/hashslot"

	"github.com/redfence/redfence/internal/scripts"
)

// Slot is Redis Cluster's key slot of key, [hashslot.Of]: CRC16-XMODEM
// (polynomial 0x1021, initial 0) of [Tag](key), modulo 16384. The tests
// check it against the cluster specification's values (slot_test.go) and
// against a real cluster's CLUSTER KEYSLOT (lua's cluster test).
func Slot(key string) int { return hashslot.Of(key) }

// Tag is the part of key Redis Cluster hashes: the bytes between the first
// '{' and the first '}' after it, if that is non-empty; otherwise the whole
// key.
func Tag(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

// SameSlot returns n lock names under prefix, base first and then names
// made from it, whose keys all hash to one Cluster slot, and that slot: a
// test of what happens to every lock of a slot (a move, a failover).
func SameSlot(prefix, base string, n int) ([]string, int) {
	slot := hashslot.Of(scripts.KeysFor(prefix, base).Lock)
	names := []string{base}
	for i := 0; len(names) < n; i++ {
		name := base + "-" + strconv.Itoa(i)
		if hashslot.Of(scripts.KeysFor(prefix, name).Lock) == slot {
			names = append(names, name)
		}
	}
	return names, slot
}

// NameWhere returns the first lock name made from base ("base-0",
// "base-1", ...) whose keys under prefix hash to a slot for which ok
// holds: a name on a given primary, say.
func NameWhere(prefix, base string, ok func(slot int) bool) string {
	for i := 0; ; i++ {
		name := base + "-" + strconv.Itoa(i)
		if ok(hashslot.Of(scripts.KeysFor(prefix, name).Lock)) {
			return name
		}
	}
}
