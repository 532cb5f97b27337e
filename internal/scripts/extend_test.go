package scripts_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

// A request made by NewExtendReq, whose arguments are built once for a
// renewer to send again and again, sends the very command a request built
// field by field does, and each request of a batch gets its own answer:
// held for the holder's token, not held for another.
func TestExtendBatchPreparedRequestsSendTheSameCommand(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, be testenv.Backend) {
		ctx := context.Background()
		prefix := "extend:" + testenv.Unique(t)
		k1, k2 := scripts.KeysFor(prefix, "a"), scripts.KeysFor(prefix, "b")
		a1, err := scripts.Acquire(ctx, be.Client, k1, &scripts.Request{Owner: "o1", Level: "l1", TTL: time.Minute})
		require.NoError(t, err)
		a2, err := scripts.Acquire(ctx, be.Client, k2, &scripts.Request{Owner: "o2", Level: "l2", TTL: time.Minute})
		require.NoError(t, err)
		require.True(t, a1.OK && a2.OK)

		var sent [][]any
		be.Client.AddHook(testenv.Hook{Sent: func(cmds []redis.Cmder, pipe bool) {
			for _, c := range cmds {
				if n := c.Name(); n == "fcall" || n == "evalsha" || n == "eval" {
					sent = append(sent, c.Args())
				}
			}
		}})
		prepared := scripts.NewExtendReq(k1, "o1", a1.Token, 90*time.Second)
		require.True(t, prepared.Prepared())
		plain := scripts.ExtendReq{Keys: k1, Owner: "o1", Token: a1.Token, TTL: 90 * time.Second}
		require.False(t, plain.Prepared())
		stale := scripts.NewExtendReq(k2, "o2", a2.Token+1, 90*time.Second)
		res := scripts.ExtendBatch(ctx, be.Client, []scripts.ExtendReq{prepared, plain, stale})

		require.Len(t, res, 3)
		for i, want := range []bool{true, true, false} {
			require.NoError(t, res[i].Err, "request %d", i)
			require.Equal(t, want, res[i].Held, "request %d", i)
		}
		// The last three: miniredis answers the first EVALSHA NOSCRIPT.
		require.GreaterOrEqual(t, len(sent), 3)
		last := sent[len(sent)-3:]
		require.Equal(t, fmt.Sprint(last[1]), fmt.Sprint(last[0]), "a prepared request must send what a plain one does")
		require.Equal(t, []any{"2", k1.Lock, k1.Forced, "o1", a1.Token.String(), "90000"}, strs(last[0][2:]))
	})
}

// strs prints each argument as Redis receives it.
func strs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = fmt.Sprint(a)
	}
	return out
}
