package reentrant_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// Defects found in review of the read-write lock and the semaphore: each
// test fails on the code as it was reviewed.

func reviewClient(t *testing.T, b testenv.Backend, opts ...reentrant.ClientOption) (*reentrant.Client, string) {
	t.Helper()
	p := testenv.Unique(t)
	c, err := reentrant.New(b.Client, append([]reentrant.ClientOption{reentrant.WithPrefix(p)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, p
}

func reviewWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 20*time.Second, 2*time.Millisecond, what)
}
