package fence_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
)

func TestContextCarriesTokens(t *testing.T) {
	ctx := context.Background()
	_, ok := fence.FromContext(ctx)
	require.False(t, ok)
	_, ok = fence.TokenFor(ctx, "a")
	require.False(t, ok)

	a := fence.NewContext(ctx, "a", 7)
	ab := fence.NewContext(a, "b", 9)
	a2 := fence.NewContext(ab, "a", 11)
	got, ok := fence.FromContext(ab)
	require.True(t, ok)
	require.Equal(t, map[string]fence.Token{"a": 7, "b": 9}, got)
	got["a"] = 1 // the caller's copy
	tok, ok := fence.TokenFor(ab, "a")
	require.True(t, ok)
	require.Equal(t, fence.Token(7), tok)
	got, _ = fence.FromContext(a2)
	require.Equal(t, map[string]fence.Token{"a": 11, "b": 9}, got, "a newer token replaces the resource's")
	got, _ = fence.FromContext(a)
	require.Equal(t, map[string]fence.Token{"a": 7}, got, "a parent context is unchanged")
}
