package testenv

import "strings"

// Slot is Redis Cluster's key slot of key: CRC16-XMODEM (polynomial 0x1021,
// initial 0) of [Tag](key), modulo 16384. go-redis keeps its copy in an
// internal package, so the tests carry this one, checked against the
// cluster specification's values and against a real cluster's CLUSTER
// KEYSLOT (lua's cluster test).
func Slot(key string) int {
	s := Tag(key)
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

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
