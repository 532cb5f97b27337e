package memory_test

import (
	"testing"

	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
	"github.com/redfence/redfence/storage/storagetest"
)

// TestConformance runs the shared suite against the reference store. It has
// no backend to break, so the broken-backend test skips.
func TestConformance(t *testing.T) {
	storagetest.Run(t, func(*testing.T) storage.Store { return memory.New() })
}
