package scripts

import (
	"context"
	"encoding"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// An argument vector sends what the plain values would: each value's bytes
// (what go-redis writes) and its text (what a hook prints) are the value,
// for the largest numbers it may hold, in one allocation besides the queue
// member's string. Trailing optional arguments at their defaults are left
// out.
func TestArgvHoldsTheValues(t *testing.T) {
	k := KeysFor("p", "n")
	r := &Request{Owner: "owner-1", Level: "level-1", TTL: math.MaxInt64, Meta: "meta",
		MaxDepth: math.MaxInt64, Waiter: &Waiter{Channel: "ch", Claim: time.Second, Queue: math.MaxInt64},
		Tokens: Tokens{Time: true, Idle: math.MaxInt64}, Again: true}
	ms := fmt.Sprint(int64(math.MaxInt64) / int64(time.Millisecond))
	want := []string{"4", k.Lock, k.Queue, k.Floor, k.Counter, "owner-1", ms, "level-1", ms,
		"level-1\n1000\nowner-1\nmeta\npch", ms, "meta", fmt.Sprint(int64(math.MaxInt64)), "1"}
	args := acquireArgs(k, r)
	require.Len(t, args, 16)
	for i, a := range args[2:] {
		require.Equal(t, want[i], fmt.Sprint(a), "argument %d as text", i+2)
		if m, ok := a.(encoding.BinaryMarshaler); ok {
			b, err := m.MarshalBinary()
			require.NoError(t, err)
			require.Equal(t, want[i], string(b), "argument %d as written", i+2)
		}
	}
	args[0], args[1] = "fcall", "f"
	require.Equal(t, "fcall f "+strings.Join(want, " "), redis.NewCmd(context.Background(), args...).String(),
		"a printed command shows the values")

	r.Again = false
	require.Len(t, acquireArgs(k, r), 15, "a call's first attempt sends no ARGV[9]")
	r.MaxDepth = DefaultMaxDepth
	require.Len(t, acquireArgs(k, r), 14, "the default depth bound is left out")
	r.Meta = ""
	require.Len(t, acquireArgs(k, r), 13, "no metadata: left out")
	r.Waiter, r.MaxDepth, r.Tokens = nil, 0, NewTokens(true, time.Hour)
	args = acquireArgs(k, r)
	require.Len(t, args, 15, "no depth bound: sent, with the empty optional arguments before it")
	require.Equal(t, []any{"", "", ""}, []any{args[11], args[12], args[13]})
	r.MaxDepth = DefaultMaxDepth
	require.Len(t, acquireArgs(k, r), 11, "a TryLock's attempt sends four arguments")
	require.LessOrEqual(t, testing.AllocsPerRun(100, func() { acquireArgs(k, r) }), 1.0)
	require.Equal(t, "3600000", fmt.Sprint(acquireArgs(k, r)[10]), "the time mode's ARGV")
	r.Tokens = Tokens{}
	args = acquireArgs(k, r)
	require.Equal(t, []string{k.Counter, k.Floor}, []string{fmt.Sprint(args[5]), fmt.Sprint(args[6])},
		"strict tokens pass the name's counter, then the floor")
	require.Equal(t, "0", fmt.Sprint(args[10]), "the strict mode's ARGV")
}
