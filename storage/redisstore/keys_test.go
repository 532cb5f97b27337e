package redisstore_test

import (
	"strings"
	"testing"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/redisstore"
)

// crc16 is CRC16-XMODEM (polynomial 0x1021, initial 0), the checksum Redis
// Cluster maps keys to slots with.
func crc16(s string) uint16 {
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
	return crc
}

// hashTag is Redis Cluster's rule: the bytes between the first '{' and the
// first '}' after it, if that is non-empty; otherwise the whole key.
func hashTag(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

func slot(key string) int { return int(crc16(hashTag(key))) % 16384 }

func TestSlotFunction(t *testing.T) {
	// Reference values from the Redis Cluster specification and
	// CLUSTER KEYSLOT.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x; want 0x31c3", got)
	}
	for key, want := range map[string]int{"foo": 12182, "somekey": 11058, "{user1000}.following": 3443, "foo{}{bar}": 8363} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d; want %d", key, got, want)
		}
	}
}

// TestKeysSingleSlot checks that every key, braces and escape characters
// included, lands in a well-formed hash tag holding the whole escaped key,
// and that no two keys share a Redis key.
func TestKeysSingleSlot(t *testing.T) {
	_, c := testenv.Mini(t)
	s, err := redisstore.New(c, redisstore.WithPrefix("p:q"))
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{
		"plain", "{", "}", "{}", "}{", "{a}", "a{b}c", "{{}}", "%", "%7B", "%7D", "%25", "%7B%7D",
		"{%7B}", "\x00{\x00}", "日本{語}", strings.Repeat("}", storage.MaxKeyLen),
	}
	seen := map[string]string{}
	esc := strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
	for _, key := range keys {
		rk := mustKey(t, s, key)
		if other, dup := seen[rk]; dup {
			t.Errorf("keys %q and %q share Redis key %q", key, other, rk)
		}
		seen[rk] = key
		if tag := hashTag(rk); tag != esc.Replace(key) {
			t.Errorf("key %q: Redis key %q has hash tag %q; want the whole escaped key %q", key, rk, tag, esc.Replace(key))
		}
		if strings.ContainsAny(hashTag(rk), "{}") {
			t.Errorf("key %q: hash tag %q contains a brace", key, hashTag(rk))
		}
		if slot(rk) != int(crc16(esc.Replace(key)))%16384 {
			t.Errorf("key %q: slot %d is not the slot of its escaped key", key, slot(rk))
		}
	}
}
