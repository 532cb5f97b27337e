package lua_test

import (
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

// stateRig checks a lock's keys against lib.lua's header.
type stateRig struct {
	*queueRig
	counter string // the key m's tokens come from
}

// keys checks that the keys under the prefix are exactly want.
func (s *stateRig) keys(step string, want ...string) {
	s.t.Helper()
	got := s.rdb.Keys(s.ctx, prefixOf(s.k)+":*").Val()
	slices.Sort(got)
	slices.Sort(want)
	require.Equal(s.t, want, got, "%s: the keys under the prefix", step)
}

// hold checks the hold's fields and that its expiry is a lease of at most
// lease and more than least.
func (s *stateRig) hold(step string, fields map[string]string, least, lease time.Duration) {
	s.t.Helper()
	require.Equal(s.t, fields, s.rdb.HGetAll(s.ctx, s.k.Lock).Val(), "%s: the hold's fields", step)
	left := s.rdb.PTTL(s.ctx, s.k.Lock).Val()
	require.Greater(s.t, left, least, "%s: the hold's expiry is the lease", step)
	require.LessOrEqual(s.t, left, lease, "%s: the hold's expiry is the lease", step)
}

// counted checks the counter's value and expiry: the floor expires its
// idle time (and a sixteenth) after its last write, a strict counter never.
func (s *stateRig) counted(step string, tok fence.Token) {
	s.t.Helper()
	require.Equal(s.t, tok.String(), s.rdb.Get(s.ctx, s.counter).Val(), "%s: the counter is the last token", step)
	left := s.rdb.PTTL(s.ctx, s.counter).Val()
	if !s.tokens.Time {
		require.Equal(s.t, time.Duration(-1), left, "%s: a strict counter never expires", step)
		return
	}
	require.Greater(s.t, left, s.tokens.Idle-time.Minute, "%s: the floor expires after its idle time", step)
	require.LessOrEqual(s.t, left, s.tokens.Idle+s.tokens.Idle/16, "%s: the floor's expiry", step)
}

// After each operation the keys under the prefix and the hold's fields
// are exactly what lib.lua's header says: a hold while held, its expiry
// the lease; nothing but the counter once released or expired; the queue
// while someone waits; the forced-unlock record after a force.
func TestStateTable(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		for _, mode := range tokenModes {
			t.Run(mode.name, func(t *testing.T) {
				r := newQueueRig(t, b)
				r.tokens = mode.m
				s := &stateRig{queueRig: r, counter: counterKey(r.k, mode.m)}
				k, ctx := r.k, r.ctx
				tokenOf := func(a scripts.Acquired) string { return a.Token.String() }

				a, err := scripts.Acquire(ctx, r.rdb, k, &scripts.Request{Owner: "o1", TTL: time.Minute, Level: "a", Meta: "job 1", Tokens: mode.m})
				require.NoError(t, err)
				require.Equal(t, scripts.Acquired{OK: true, Token: a.Token, Depth: 1}, a)
				s.keys("fresh take", k.Lock, s.counter)
				s.hold("fresh take", map[string]string{"o": "o1", "t": tokenOf(a), "l:a": "1", "m": "job 1"}, 50*time.Second, time.Minute)
				s.counted("fresh take", a.Token)

				req := &scripts.Request{Owner: "o1", TTL: 2 * time.Minute, Level: "b", Meta: "ignored", Tokens: mode.m}
				re, err := scripts.Acquire(ctx, r.rdb, k, req)
				require.NoError(t, err)
				require.Equal(t, scripts.Acquired{OK: true, Token: a.Token, Depth: 2}, re)
				s.keys("reentry", k.Lock, s.counter)
				s.hold("reentry", map[string]string{"o": "o1", "t": tokenOf(a), "l:a": "1", "l:b": "2", "m": "job 1"}, 110*time.Second, 2*time.Minute)

				require.Equal(t, scripts.Released{Depth: 1}, r.release("o1", a.Token, "b"))
				s.keys("release of one level", k.Lock, s.counter)
				s.hold("release of one level", map[string]string{"o": "o1", "t": tokenOf(a), "l:a": "1", "m": "job 1"}, 110*time.Second, 2*time.Minute)

				require.Equal(t, scripts.Released{}, r.release("o1", a.Token, "a"))
				s.keys("full release", s.counter)
				s.counted("full release", a.Token)

				e, err := scripts.Acquire(ctx, r.rdb, k, &scripts.Request{Owner: "o1", TTL: 100 * time.Millisecond, Level: "e", Tokens: mode.m})
				require.NoError(t, err)
				require.Greater(t, e.Token, a.Token)
				expire(t, b, k.Lock)
				s.keys("expiry", s.counter)
				s.counted("expiry", e.Token)

				h := r.acquire("o1", "h", nil)
				w := r.waiter("o2", 5*time.Second)
				require.False(t, r.acquire("o2", "w", w).OK)
				s.keys("a waiter queued", k.Lock, k.Queue, s.counter)
				s.hold("a waiter queued", map[string]string{"o": "o1", "t": tokenOf(h), "l:h": "1", "q": "1"}, 50*time.Second, time.Minute)
				require.Equal(t, []string{memberOf(r.request("o2", "w", w))}, r.rdb.ZRange(ctx, k.Queue, 0, -1).Val())
				require.Greater(t, r.rdb.PTTL(ctx, k.Queue).Val(), 50*time.Second, "the queue lives its waiters' time")

				require.Equal(t, scripts.Released{}, r.release("o1", h.Token, "h"))
				_, msg := r.message()
				handed := r.state().Token
				require.Greater(t, handed, h.Token)
				require.Equal(t, "w "+handed.String(), msg, "one message, on the waiter's channel")
				s.keys("handoff", k.Lock, s.counter)
				s.hold("handoff", map[string]string{"o": "o2", "t": handed.String(), "l:w": "1", "q": "1"}, 0, 5*time.Second)
				s.counted("handoff", handed)
				require.Equal(t, scripts.Acquired{OK: true, Token: handed, Depth: 1}, r.acquire("o2", "w", w))
				s.hold("claim", map[string]string{"o": "o2", "t": handed.String(), "l:w": "1", "q": "1"}, 50*time.Second, time.Minute)

				f, err := scripts.Force(ctx, r.rdb, k, handed, "ops", mode.m)
				require.NoError(t, err)
				require.True(t, f.Ended)
				s.keys("force", s.counter, k.Forced)
				s.counted("force", handed)
				require.Regexp(t, regexp.MustCompile(`^`+handed.String()+` [1-9][0-9]* ops$`), r.rdb.Get(ctx, k.Forced).Val())
				left := r.rdb.PTTL(ctx, k.Forced).Val()
				require.Greater(t, left, 50*time.Second, "the record lives as long as the forced lease would have")
				require.LessOrEqual(t, left, time.Minute)
			})
		}
	})
}

// Inspect reads a lock in one step: a free name shows only its counter
// and the last forced unlock; a held one its holder, levels, lease,
// metadata and waiters; a Redlock node's pending hold no token.
func TestInspectReply(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		for _, mode := range tokenModes {
			r := newQueueRig(t, b)
			r.tokens = mode.m
			k := r.k
			require.Equal(t, scripts.State{Name: k.Name}, r.state(), "%s: never used", mode.name)

			a, err := scripts.Acquire(r.ctx, r.rdb, k, &scripts.Request{Owner: "o1", TTL: time.Minute, Level: "a", Meta: "job", Tokens: mode.m})
			require.NoError(t, err)
			r.acquire("o1", "b", nil)
			require.False(t, r.acquire("o2", "w", r.waiter("o2", time.Minute)).OK)
			st := r.state()
			require.Greater(t, st.TTL, 50*time.Second)
			require.ElementsMatch(t, []string{"a", "b"}, st.Levels)
			st.TTL, st.Levels = 0, nil
			want := scripts.State{Name: k.Name, Held: true, Owner: "o1", Depth: 2, Token: a.Token, Meta: "job", Waiters: 1}
			if mode.m.Time {
				want.Floor = a.Token
			} else {
				want.Counter = a.Token
			}
			require.Equal(t, want, st, mode.name)

			f, err := scripts.Force(r.ctx, r.rdb, k, a.Token, "ops", mode.m)
			require.NoError(t, err)
			require.True(t, f.Ended)
			handed := r.state()
			require.Equal(t, "o2", handed.Owner, "%s: handed to the waiter", mode.name)
			require.NoError(t, r.rdb.Del(r.ctx, k.Lock).Err())
			st = r.state()
			require.NotNil(t, st.Forced)
			require.Equal(t, a.Token, st.Forced.Token)
			require.Equal(t, "ops", st.Forced.By)
			want = scripts.State{Name: k.Name, Forced: st.Forced, Counter: handed.Counter, Floor: handed.Floor}
			require.Equal(t, want, st, "%s: free, the forced unlock's record alive", mode.name)
			require.Equal(t, max(handed.Counter, handed.Floor), handed.Token)
		}

		k := keys(t)
		_, err := scripts.QAcquire(t.Context(), b.Client, k, joined(t, b.Client), &scripts.Request{Owner: "o", TTL: time.Minute, Level: "p"})
		require.NoError(t, err)
		st := inspect(t, b.Client, k)
		require.Greater(t, st.TTL, 50*time.Second)
		st.TTL = 0
		require.Equal(t, scripts.State{Name: k.Name, Held: true, Owner: "o", Depth: 1, Pending: true, Levels: []string{"p"}}, st, "a pending hold")
	})
}

// A floor idle past its expiry goes, and with it the last key of a
// released time-token name; the next token comes from the clock, above
// the last while the clock has not stepped back.
func TestIdleFloorExpires(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		short := scripts.NewTokens(true, 100*time.Millisecond)
		k := keys(t)
		last := takeAndFree(t, b.Client, k, short)
		left := b.Client.PTTL(t.Context(), k.Floor).Val()
		require.Positive(t, left)
		require.LessOrEqual(t, left, 100*time.Millisecond+100*time.Millisecond/16, "idle + idle/16")
		expire(t, b, k.Floor)
		require.Empty(t, b.Client.Keys(t.Context(), prefixOf(k)+":*").Val(), "nothing left of the name")
		require.Greater(t, takeAndFree(t, b.Client, k, short), last)
	})
}
