package scripts_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

var listNames = []string{"a", "orders:42", "%", "%25", "%7B", "{", "}", "}{", "a}:q", "x%7d", "with space", "é", "*", "[a]"}

// NameOf inverts KeysFor's Lock and refuses every other key of a lock.
func TestNameOf(t *testing.T) {
	for _, name := range listNames {
		for _, prefix := range []string{"redfence", "a*b", `p\[x]?`, "p:q"} {
			k := scripts.KeysFor(prefix, name)
			got, ok := scripts.NameOf(prefix, k.Lock)
			require.True(t, ok, "%q under %q", name, prefix)
			require.Equal(t, name, got)
			for _, other := range []string{k.Queue, k.Counter, k.Floor, scripts.JoinedKey(prefix)} {
				_, ok := scripts.NameOf(prefix, other)
				require.False(t, ok, "%q is no lock hash", other)
			}
		}
	}
	for _, key := range []string{"redfence:{%7b}", "redfence:{%}", "redfence:{}", "redfence:{a}b}", "redfence:{a",
		"other:{a}", "redfence:{%2}", "redfence:x:{a}"} {
		_, ok := scripts.NameOf("redfence", key)
		require.False(t, ok, "%q is no lock hash", key)
	}
}

// SCAN with LockPattern finds every lock hash under the prefix and no other
// key of a lock, under prefixes with glob characters, on each server's own
// glob matcher.
func TestLockPatternMatchesLockHashes(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx := t.Context()
		for _, prefix := range []string{testenv.Unique(t), testenv.Unique(t) + `*[x]?\`} {
			var want []string
			for _, name := range listNames {
				k := scripts.KeysFor(prefix, name)
				want = append(want, k.Lock)
				for _, key := range []string{k.Lock, k.Queue, k.Counter, k.Floor, "x" + k.Lock, prefix + "x:{" + name + "}"} {
					require.NoError(t, b.Client.Set(ctx, key, "1", 0).Err())
					t.Cleanup(func() { b.Client.Del(context.Background(), key) })
				}
			}
			var got []string
			iter := b.Client.Scan(ctx, 0, scripts.LockPattern(prefix), 100).Iterator()
			for iter.Next(ctx) {
				got = append(got, iter.Val())
			}
			require.NoError(t, iter.Err())
			require.ElementsMatch(t, want, got, "pattern %q", scripts.LockPattern(prefix))
		}
	})
}
