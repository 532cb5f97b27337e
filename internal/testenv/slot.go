package testenv

import (
	"strings"

	"github.com/redfence/redfence/lua"
)

// Slot is Redis Cluster's key slot of key, [lua.Slot]: CRC16-XMODEM
// (polynomial 0x1021, initial 0) of [Tag](key), modulo 16384. The tests
// check it against the cluster specification's values (slot_test.go) and
// against a real cluster's CLUSTER KEYSLOT (lua's cluster test).
func Slot(key string) int { return lua.Slot(key) }

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
