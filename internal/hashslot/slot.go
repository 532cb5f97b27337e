// Package hashslot is Redis Cluster's slot arithmetic, for the lock client's
// shard channels and the tests: a key's slot, and a hash tag for each slot.
package hashslot

import (
	"strconv"
	"strings"
	"sync"
)

// Slots is the number of Redis Cluster hash slots.
const Slots = 16384

// Of returns the Redis Cluster slot of key: CRC16-XMODEM (polynomial
// 0x1021, initial 0) of its hash tag, modulo 16384. The tag is the bytes
// between the first '{' and the first '}' after it, when not empty;
// otherwise the whole key is hashed. go-redis keeps its copy in an
// internal package.
func Of(key string) int {
	s := key
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			s = key[i+1 : i+1+j]
		}
	}
	return crc(s)
}

// crc is the slot of s, a hash tag's bytes: CRC16-XMODEM modulo Slots.
func crc[T string | []byte](s T) int {
	var c uint16
	for i := 0; i < len(s); i++ {
		c ^= uint16(s[i]) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
	}
	return int(c) % Slots
}

// slotTags maps each slot to the smallest n whose base-36 form hashes to
// it. The search is deterministic, so every process agrees; it takes about
// 90,000 CRCs (a few ms), once, and the longest tag is 4 characters.
var slotTags = sync.OnceValue(func() *[Slots]uint32 {
	var tags [Slots]uint32
	var found [Slots]bool
	var buf [8]byte
	for n, left := uint32(0), Slots; left > 0; n++ {
		// Formatted on the stack: the search allocates nothing.
		if s := crc(strconv.AppendUint(buf[:0], uint64(n), 36)); !found[s] {
			found[s], tags[s] = true, n
			left--
		}
	}
	return &tags
})

// AppendTag appends Tag(slot) to dst and returns the extended buffer, for
// callers that build a key without an allocation of the tag's own. It
// panics for a slot outside [0, Slots).
func AppendTag(dst []byte, slot int) []byte {
	dst = append(dst, '{')
	dst = strconv.AppendUint(dst, uint64(slotTags()[slot]), 36)
	return append(dst, '}')
}

// Tag returns a hash tag, braces included, that puts every key holding
// it after a brace-free prefix in slot. It panics for a slot outside
// [0, Slots).
func Tag(slot int) string {
	return "{" + strconv.FormatUint(uint64(slotTags()[slot]), 36) + "}"
}
