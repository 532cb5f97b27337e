package hashslot_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/hashslot"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

// Every slot has a tag, each tag lands in its slot after any brace-free
// prefix, and tags stay short.
func TestSlotTagCoversEverySlot(t *testing.T) {
	for n := range hashslot.Slots {
		tag := hashslot.Tag(n)
		require.LessOrEqual(t, len(tag), 6, "slot %d: tag %q", n, tag)
		require.Equal(t, n, hashslot.Of("redfence:c:"+tag+":0123456789abcdef"), "slot %d: tag %q", n, tag)
		require.Equal(t, n, testenv.Slot(tag), "slot %d: tag %q", n, tag)
	}
	require.Panics(t, func() { hashslot.Tag(hashslot.Slots) })
}
