package lua_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/lua"
)

// slot is Redis Cluster's key slot: CRC16/XMODEM of the hash tag (the part
// between the first '{' and the next '}', if non-empty) modulo 16384.
// go-redis keeps its own copy in an internal package, so the test carries
// one and checks it against the value Redis's cluster spec gives.
func slot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
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

func TestSlotFunction(t *testing.T) {
	// The cluster specification's check value: CRC16("123456789") = 0x31C3.
	require.Equal(t, 0x31C3%16384, slot("123456789"))
	require.Equal(t, slot("user1000"), slot("{user1000}.following"))
	require.NotEqual(t, slot("{}a"), slot("{}b"), "an empty tag does not count")
}

var awkwardNames = []string{
	"plain", "}", "{", "{}", "}{", "a}b", "{a}", "}}}", "{{{", "%", "%7D", "%7B", "%25",
	"x{y}z", "caf\u00e9", "\x00", "a\x00}", "line\nbreak", strings.Repeat("}", 40),
}

func TestKeysShareOneSlot(t *testing.T) {
	for _, name := range awkwardNames {
		k := lua.KeysFor("redfence", name)
		want := slot(k.Lock)
		for _, key := range []string{k.Queue} {
			require.Equal(t, want, slot(key), "name %q: %s and %s in different slots", name, k.Lock, key)
		}
		if !strings.ContainsAny(name, "{}%") {
			require.Equal(t, slot("{"+name+"}"), want, "names without braces keep their natural slot")
		}
	}
}

func TestKeysAreOneToOne(t *testing.T) {
	seen := map[string]string{}
	for _, name := range awkwardNames {
		k := lua.KeysFor("p", name).Lock
		if other, dup := seen[k]; dup {
			t.Fatalf("names %q and %q share key %s", name, other, k)
		}
		seen[k] = name
	}
}

func FuzzKeys(f *testing.F) {
	for _, n := range awkwardNames {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if lua.CheckName(name) != nil {
			return
		}
		k := lua.KeysFor("redfence", name)
		want := slot(k.Lock)
		for _, key := range []string{k.Queue} {
			if slot(key) != want {
				t.Fatalf("name %q: %s in slot %d, %s in %d", name, k.Lock, want, key, slot(key))
			}
		}
		if strings.Count(k.Lock, "{") != 1 || strings.Count(k.Lock, "}") != 1 {
			t.Fatalf("name %q: braces leaked into %s", name, k.Lock)
		}
	})
}
