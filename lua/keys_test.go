package lua_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
)

var awkwardNames = []string{
	"plain", "}", "{", "{}", "}{", "a}b", "{a}", "}}}", "{{{", "%", "%7D", "%7B", "%25",
	"x{y}z", "caf\u00e9", "\x00", "a\x00}", "line\nbreak", strings.Repeat("}", 40),
}

func TestKeysShareOneSlot(t *testing.T) {
	for _, name := range awkwardNames {
		k := lua.KeysFor("redfence", name)
		want := testenv.Slot(k.Lock)
		for _, key := range []string{k.Queue, k.Counter} {
			require.Equal(t, want, testenv.Slot(key), "name %q: %s and %s in different slots", name, k.Lock, key)
		}
		if !strings.ContainsAny(name, "{}%") {
			require.Equal(t, testenv.Slot("{"+name+"}"), want, "names without braces keep their natural slot")
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
		if name == "" { // KeysFor wants a non-empty name
			return
		}
		k := lua.KeysFor("redfence", name)
		want := testenv.Slot(k.Lock)
		for _, key := range []string{k.Queue, k.Counter} {
			if testenv.Slot(key) != want {
				t.Fatalf("name %q: %s in slot %d, %s in %d", name, k.Lock, want, key, testenv.Slot(key))
			}
		}
		if strings.Count(k.Lock, "{") != 1 || strings.Count(k.Lock, "}") != 1 {
			t.Fatalf("name %q: braces leaked into %s", name, k.Lock)
		}
	})
}
