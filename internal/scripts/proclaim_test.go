package scripts_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

// proclaim.lua writes only the holding ownership's election metadata:
// not another owner's or token's, not a plain lock's, not an expired
// lease's; the stamp is written once.
func TestProclaim(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, be testenv.Backend) {
		ctx := context.Background()
		k := scripts.KeysFor("proclaim:"+testenv.Unique(t), "leader")
		a, err := scripts.Acquire(ctx, be.Client, k, &scripts.Request{Owner: "o", Level: "l", TTL: 300 * time.Millisecond, Meta: "\x1d0 0 first"})
		require.NoError(t, err)
		require.True(t, a.OK)
		meta := func() string { return be.Client.HGet(ctx, k.Lock, "m").Val() }

		ok, err := scripts.Proclaim(ctx, be.Client, k, "other", a.Token, "not mine")
		require.NoError(t, err)
		require.False(t, ok, "another owner")
		ok, err = scripts.Proclaim(ctx, be.Client, k, "o", a.Token+1, "not mine")
		require.NoError(t, err)
		require.False(t, ok, "another token")
		_, held, err := scripts.Stamp(ctx, be.Client, k, a.Token+1)
		require.NoError(t, err)
		require.False(t, held, "another token's term")
		require.Equal(t, "\x1d0 0 first", meta())

		m, held, err := scripts.Stamp(ctx, be.Client, k, a.Token)
		require.NoError(t, err)
		require.True(t, held)
		require.Regexp(t, regexp.MustCompile(`^\x1d[1-9][0-9]* 0 first$`), m)
		again, _, err := scripts.Stamp(ctx, be.Client, k, a.Token)
		require.NoError(t, err)
		require.Equal(t, m, again, "stamped once")

		ok, err = scripts.Proclaim(ctx, be.Client, k, "o", a.Token, "second")
		require.NoError(t, err)
		require.True(t, ok)
		since := regexp.MustCompile(`^\x1d[0-9]+`).FindString(m)
		require.Equal(t, since+" 1 second", meta(), "the start kept, the count raised")

		be.Expire(400 * time.Millisecond) // the lease ends; nothing settles it yet
		ok, err = scripts.Proclaim(ctx, be.Client, k, "o", a.Token, "late")
		require.NoError(t, err)
		require.False(t, ok, "an expired lease is not proclaimed")
		_, held, err = scripts.Stamp(ctx, be.Client, k, a.Token)
		require.NoError(t, err)
		require.False(t, held)

		for i, plain := range []string{"job 42", "0 0 first"} {
			p := scripts.KeysFor("proclaim:"+testenv.Unique(t), fmt.Sprint("plain", i))
			b, err := scripts.Acquire(ctx, be.Client, p, &scripts.Request{Owner: "o", Level: "l", TTL: time.Minute, Meta: plain})
			require.NoError(t, err)
			ok, err = scripts.Proclaim(ctx, be.Client, p, "o", b.Token, "x")
			require.NoError(t, err)
			require.False(t, ok, "a plain lock's metadata %q is not an election's", plain)
			m, held, err = scripts.Stamp(ctx, be.Client, p, b.Token)
			require.NoError(t, err)
			require.True(t, held)
			require.Equal(t, plain, m, "nothing to stamp")
		}
	})
}
