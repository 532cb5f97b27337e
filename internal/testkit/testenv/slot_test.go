package testenv_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
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

func TestSameSlotAndNameWhere(t *testing.T) {
	names, slot := testenv.SameSlot("p", "base", 5)
	require.Len(t, names, 5)
	require.Equal(t, "base", names[0])
	seen := map[string]bool{}
	for _, n := range names {
		require.False(t, seen[n], "names repeat: %v", names)
		seen[n] = true
		require.Equal(t, slot, testenv.Slot(scripts.KeysFor("p", n).Lock), n)
	}
	want := (slot + 1) % 16384
	n := testenv.NameWhere("p", "base", func(s int) bool { return s%8 == want%8 })
	require.Equal(t, want%8, testenv.Slot(scripts.KeysFor("p", n).Lock)%8)
}
