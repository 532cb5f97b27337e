package testenv_test

import (
	"testing"

	"github.com/redfence/redfence/internal/testenv"
)

// TestSlot checks Slot against the Redis Cluster specification's check
// value, CRC16("123456789") = 0x31C3, and against CLUSTER KEYSLOT's answers.
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789": 0x31C3 % 16384, "foo": 12182, "somekey": 11058,
		"{user1000}.following": 3443, "foo{}{bar}": 8363,
	} {
		if got := testenv.Slot(key); got != want {
			t.Errorf("Slot(%q) = %d; want %d", key, got, want)
		}
	}
	if testenv.Slot("user1000") != testenv.Slot("{user1000}.following") {
		t.Error("a hash tag must be hashed alone")
	}
	if testenv.Slot("{}a") == testenv.Slot("{}b") {
		t.Error("an empty tag does not count")
	}
}
