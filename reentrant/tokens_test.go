//go:build unix

package reentrant_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/redisproc"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

// issue takes and releases name n times on c and returns the highest token
// it got.
func issue(t *testing.T, c *reentrant.Client, name string, n int) fence.Token {
	t.Helper()
	var top fence.Token
	for range n {
		l, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		require.Greater(t, l.Token(), top)
		top = l.Token()
		require.NoError(t, l.Unlock(t.Context()))
	}
	return top
}

// firstAfter is the token of the first acquisition of name on c.
func firstAfter(t *testing.T, c *reentrant.Client, name string) fence.Token {
	t.Helper()
	l, err := c.Lock(t.Context(), name)
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Unlock(t.Context())) }()
	return l.Token()
}

// The events that lose the counter. In time mode the first token after each
// is above every token before it; the strict counter starts again at 1.
func TestTimeTokensSurviveALostCounter(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []reentrant.ClientOption
	}{{"counter", nil}, {"time", []reentrant.ClientOption{reentrant.WithTimeTokens()}}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Run("flushall", func(t *testing.T) {
				srv := redisproc.Start(t)
				c, name := newClient(t, srv.Client(), mode.opts...), testenv.Unique(t)
				before := issue(t, c, name, 5)
				require.NoError(t, srv.Client().FlushAll(t.Context()).Err())
				checkAfterLoss(t, mode.name, before, firstAfter(t, c, name))
			})
			t.Run("restart-without-persistence", func(t *testing.T) {
				srv := redisproc.Start(t) // no AOF, no RDB
				c, name := newClient(t, srv.Client(), mode.opts...), testenv.Unique(t)
				before := issue(t, c, name, 5)
				srv.Crash(0)
				checkAfterLoss(t, mode.name, before, firstAfter(t, c, name))
			})
			t.Run("failover", func(t *testing.T) {
				primary, replica := primaryWithReplica(t)
				c, name := newClient(t, primary.Client(), mode.opts...), testenv.Unique(t)
				issue(t, c, name, 2)
				replica.WaitSync(t.Context())
				replica.Isolate()
				// Tokens the replica never sees.
				before := issue(t, c, name, 5)
				primary.Kill()
				replica.Resume()
				replica.Promote()
				got, err := replica.Client().HGet(t.Context(), lua.KeysFor(prefix, name).Lock, "t").Uint64()
				require.NoError(t, err)
				require.Less(t, fence.Token(got), before, "the promoted replica must have missed tokens")
				after := newClient(t, replica.Client(), mode.opts...)
				checkAfterLoss(t, mode.name, before, firstAfter(t, after, name))
			})
		})
	}
}

func checkAfterLoss(t *testing.T, mode string, before, after fence.Token) {
	t.Helper()
	if mode == "time" {
		require.Greater(t, after, before, "the first time token after the counter was lost must be above every earlier one")
		return
	}
	require.LessOrEqual(t, after, before, "the strict counter, lost, repeats tokens (the contrast)")
}

// In time mode the lock hash, which holds the counter, expires the idle
// time after the release; in the strict mode it never expires.
func TestCounterIdleExpiry(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		for _, c := range []struct {
			opts   []reentrant.ClientOption
			lo, hi time.Duration
			desc   string
		}{
			{nil, -1, -1, "never"},
			{[]reentrant.ClientOption{reentrant.WithTimeTokens()}, reentrant.DefaultCounterIdleExpiry - time.Minute, reentrant.DefaultCounterIdleExpiry, "7 days"},
			{[]reentrant.ClientOption{reentrant.WithTimeTokens(), reentrant.WithCounterIdleExpiry(2 * time.Hour)}, 2*time.Hour - time.Minute, 2 * time.Hour, "2 h"},
		} {
			lc, name := newClient(t, b.Client, c.opts...), testenv.Unique(t)
			l, err := lc.Lock(t.Context(), name)
			require.NoError(t, err)
			require.NoError(t, l.Unlock(t.Context()))
			ttl := b.Client.PTTL(t.Context(), lua.KeysFor(prefix, name).Lock).Val()
			require.GreaterOrEqual(t, ttl, c.lo, c.desc)
			require.LessOrEqual(t, ttl, c.hi, c.desc)
			st, err := lc.Inspect(t.Context(), name)
			require.NoError(t, err)
			require.Equal(t, l.Token(), st.LastToken)
		}
		// The idle expiry is at least an hour (MinCounterIdleExpiry): only
		// miniredis's clock can pass it in a test.
		if b.Mini == nil {
			return
		}
		// Idle past the expiry: the counter is gone, and the name costs no
		// key at all; the next token is still above the last.
		lc, name := newClient(t, b.Client, reentrant.WithTimeTokens(), reentrant.WithCounterIdleExpiry(time.Hour)), testenv.Unique(t)
		last := issue(t, lc, name, 1)
		testenv.Advance(b.Mini, time.Hour+time.Millisecond)
		k := lua.KeysFor(prefix, name)
		require.Zero(t, b.Client.Exists(t.Context(), k.Lock, k.Queue, k.Counter).Val())
		require.Greater(t, issue(t, lc, name, 1), last)
	})
}

func TestTimeTokenOptionsBadInput(t *testing.T) {
	_, rdb := testenv.Mini(t)
	for _, opts := range [][]reentrant.ClientOption{
		{reentrant.WithCounterIdleExpiry(24 * time.Hour)}, // the strict counter never expires
		{reentrant.WithTimeTokens(), reentrant.WithCounterIdleExpiry(reentrant.MinCounterIdleExpiry - time.Millisecond)},
		{reentrant.WithTimeTokens(), reentrant.WithCounterIdleExpiry(reentrant.MaxCounterIdleExpiry + time.Millisecond)},
		{reentrant.WithTimeTokens(), reentrant.WithCounterIdleExpiry(time.Hour + time.Microsecond)},
		{reentrant.WithTimeTokens(), reentrant.WithCounterIdleExpiry(2 * time.Hour), reentrant.WithTTL(3 * time.Hour)},
	} {
		_, err := reentrant.New(rdb, opts...)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
	}
	for _, opts := range [][]reentrant.ClientOption{
		{reentrant.WithTimeTokens()},
		{reentrant.WithTimeTokens(), reentrant.WithCounterIdleExpiry(reentrant.MinCounterIdleExpiry)},
		{reentrant.WithTimeTokens(), reentrant.WithCounterIdleExpiry(reentrant.MaxCounterIdleExpiry)},
	} {
		c, err := reentrant.New(rdb, opts...)
		require.NoError(t, err)
		require.NoError(t, c.Close())
	}
}

// Clients of both modes may share a name: each issues a token above the
// counter, so tokens keep increasing whichever client takes the lock.
func TestTokenModesShareAName(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		strict, timed := newClient(t, b.Client), newClient(t, b.Client, reentrant.WithTimeTokens())
		name := testenv.Unique(t)
		var last fence.Token
		for _, c := range []*reentrant.Client{strict, timed, strict, timed, strict} {
			tok := issue(t, c, name, 2)
			require.Greater(t, tok, last)
			last = tok
		}
	})
}
