package redisstore_test

import (
	"strings"
	"testing"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/redisstore"
)

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
		if tag := testenv.Tag(rk); tag != esc.Replace(key) {
			t.Errorf("key %q: Redis key %q has hash tag %q; want the whole escaped key %q", key, rk, tag, esc.Replace(key))
		}
		if strings.ContainsAny(testenv.Tag(rk), "{}") {
			t.Errorf("key %q: hash tag %q contains a brace", key, testenv.Tag(rk))
		}
		if testenv.Slot(rk) != testenv.Slot(esc.Replace(key)) {
			t.Errorf("key %q: slot %d is not the slot of its escaped key", key, testenv.Slot(rk))
		}
	}
}
