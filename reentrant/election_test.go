package reentrant_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage/memory"
)

// eachElectionBackend runs f on a client of every deployment kind the
// tests have: miniredis and the real servers (testenv.EachRedis), and a
// Redlock of three.
func eachElectionBackend(t *testing.T, f func(t *testing.T, c, d *reentrant.Client)) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		f(t, newClient(t, b.Client), newClient(t, b.Client))
	})
	t.Run("redlock", func(t *testing.T) {
		_, nodes := redlockNodes(t, 3)
		f(t, newRedlock(t, nodes), newRedlock(t, nodes))
	})
}

// A term: campaign, leader, proclaim, a waiting candidate, resign (twice),
// the successor's term untouched by the old term's calls.
func TestElectionTerms(t *testing.T) {
	eachElectionBackend(t, func(t *testing.T, c, d *reentrant.Client) {
		ctx, name := t.Context(), testenv.Unique(t)
		ea, eb := c.Election(name), d.Election(name)
		_, err := ea.Leader(ctx)
		require.ErrorIs(t, err, reentrant.ErrNoLeader)

		before := time.Now().Add(-time.Second)
		a, err := ea.Campaign(ctx, "node-a:8080")
		require.NoError(t, err)
		require.NoError(t, a.Err())
		ld, err := eb.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, "node-a:8080", ld.Value)
		require.Equal(t, a.Token(), ld.Token)
		require.True(t, ld.Since.After(before) && ld.Since.Before(time.Now().Add(time.Second)), "since %v, the server's clock is this host's", ld.Since)

		_, err = eb.TryCampaign(ctx, "node-b")
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		won := make(chan *reentrant.Term, 1)
		go func() {
			b, err := eb.Campaign(ctx, "node-b")
			if err != nil {
				t.Error(err)
			}
			won <- b
		}()

		require.NoError(t, a.Proclaim(ctx, "node-a:9090"))
		ld2, err := ea.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, reentrant.Leader{Value: "node-a:9090", Token: ld.Token, Since: ld.Since}, ld2, "Proclaim keeps the token and the start")

		require.NoError(t, a.Resign(ctx))
		b := <-won
		require.NotNil(t, b)
		require.Greater(t, b.Token(), a.Token())
		require.ErrorIs(t, a.Err(), reentrant.ErrReleased)
		require.NoError(t, a.Resign(ctx), "Resign is idempotent")
		require.ErrorIs(t, a.Proclaim(ctx, "stale"), reentrant.ErrNotHeld)
		ld3, err := ea.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, "node-b", ld3.Value, "the old term's calls never touch the successor")
		require.Equal(t, b.Token(), ld3.Token)
		require.False(t, ld3.Since.Before(ld.Since))
		require.NoError(t, b.Resign(ctx))
		_, err = eb.Leader(ctx)
		require.ErrorIs(t, err, reentrant.ErrNoLeader)
	})
}

// Observe reports none, A, A's new value, none, B: each change once, the
// latest state first for a slow reader.
func TestElectionObserve(t *testing.T) {
	eachElectionBackend(t, func(t *testing.T, c, d *reentrant.Client) {
		ctx, name := t.Context(), testenv.Unique(t)
		e := c.Election(name)
		octx, cancel := context.WithCancel(ctx)
		seen := e.Observe(octx)
		next := func(want string) reentrant.Leader {
			t.Helper()
			for {
				select {
				case ld, ok := <-seen:
					require.True(t, ok, "closed early")
					if ld.Value == want {
						return ld
					}
				case <-time.After(time.Minute):
					t.Fatalf("no %q observed", want)
				}
			}
		}
		require.Equal(t, reentrant.Leader{}, next(""), "no leader")
		a, err := d.Election(name).Campaign(ctx, "A")
		require.NoError(t, err)
		la := next("A")
		require.Equal(t, a.Token(), la.Token)
		require.NoError(t, a.Proclaim(ctx, "A2"))
		require.Equal(t, a.Token(), next("A2").Token)
		require.NoError(t, a.Resign(ctx))
		require.Equal(t, reentrant.Leader{}, next(""))
		b, err := e.Campaign(ctx, "B")
		require.NoError(t, err)
		lb := next("B")
		require.Greater(t, lb.Token, la.Token)
		require.NoError(t, b.Resign(ctx))
		cancel()
		for range seen { // closed when ctx ends
		}
	})
}

// A term whose renewal stops ends on its local deadline, with ErrLost; the
// deposed leader's late write under its token is refused once the next
// leader wrote.
func TestElectionTermLostAndFenced(t *testing.T) {
	eachElectionBackend(t, func(t *testing.T, c, d *reentrant.Client) {
		ctx, name := t.Context(), testenv.Unique(t)
		store := memory.New()
		a, err := c.Election(name, reentrant.WithTTL(300*time.Millisecond), reentrant.WithoutRenewal()).Campaign(ctx, "A")
		require.NoError(t, err)
		require.NoError(t, store.Put(a.Context(), "config", []byte("A"), a.Token()))
		<-a.Done()
		require.ErrorIs(t, a.Err(), reentrant.ErrLost)
		require.ErrorIs(t, a.Proclaim(ctx, "A again"), reentrant.ErrNotHeld)
		require.NoError(t, a.Resign(ctx), "a lost term is over: Resign has nothing to do")

		b, err := d.Election(name).Campaign(ctx, "B")
		require.NoError(t, err)
		require.NoError(t, store.Put(b.Context(), "config", []byte("B"), b.Token()))
		err = store.Put(ctx, "config", []byte("A late"), a.Token())
		require.ErrorIs(t, err, fence.ErrStale)
		tok, ok := fence.TokenFor(b.Context(), name)
		require.True(t, ok, "a term's context carries its token")
		require.Equal(t, b.Token(), tok)
		require.NoError(t, b.Resign(ctx))
	})
}

// A holder that did not campaign is a leader with its metadata as the
// value and no start; a term not yet stamped is stamped by the first
// reader; bad values are refused.
func TestElectionEdges(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, name := t.Context(), testenv.Unique(t)
		c := newClient(t, b.Client)
		e := c.Election(name)
		l, err := c.Lock(ctx, name, reentrant.WithMetadata("plain lock"))
		require.NoError(t, err)
		ld, err := e.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, reentrant.Leader{Value: "plain lock", Token: l.Token()}, ld)
		require.NoError(t, l.Unlock(ctx))

		// A plain lock's metadata that reads like a term ("<since> <seq>
		// <value>") is a plain value: a term's carries a mark WithMetadata
		// refuses.
		for _, m := range []string{"0 0 unstamped", "12 3 job"} {
			l, err = c.Lock(ctx, name, reentrant.WithMetadata(m))
			require.NoError(t, err)
			ld, err = e.Leader(ctx)
			require.NoError(t, err)
			require.Equal(t, reentrant.Leader{Value: m, Token: l.Token()}, ld, "a plain lock's metadata %q", m)
			require.NoError(t, l.Unlock(ctx))
		}
		_, err = c.Lock(ctx, name, reentrant.WithMetadata("\x1d0 0 forged"))
		require.ErrorIs(t, err, reentrant.ErrInvalid, "the mark is a control character")

		// A term as a campaign leaves it before its stamp: the mark, then
		// "0 0 <value>" (written here by hand).
		l, err = c.Lock(ctx, name, reentrant.WithMetadata("plain"))
		require.NoError(t, err)
		require.NoError(t, b.Client.HSet(ctx, scripts.KeysFor(prefix, name).Lock, "m", "\x1d0 0 unstamped").Err())
		ld, err = e.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, "unstamped", ld.Value)
		require.False(t, ld.Since.IsZero(), "the reader stamped it")
		again, err := e.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, ld, again, "stamped once")
		st, err := c.Inspect(ctx, name)
		require.NoError(t, err)
		require.Equal(t, "unstamped", st.Meta, "Inspect shows a term's value alone")
		require.NoError(t, l.Unlock(ctx))

		for _, v := range []string{"a\nb", strings.Repeat("x", reentrant.MaxElectionValueLen+1), "\xff"} {
			_, err := e.Campaign(ctx, v)
			require.ErrorIs(t, err, reentrant.ErrInvalid, "%q", v)
		}
		_, err = e.Campaign(nil, "x") //nolint:staticcheck // a nil context is the point
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		_, err = c.Election("").Leader(ctx)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
		lead, err := e.Campaign(ctx, "leader")
		require.NoError(t, err)
		_, err = e.TryCampaign(lead.Context(), "again")
		require.ErrorIs(t, err, reentrant.ErrInvalid, "a term's own context")
		require.Contains(t, err.Error(), "campaign from another context")
		require.NoError(t, lead.Resign(ctx))
		long, err := e.Campaign(ctx, strings.Repeat("x", reentrant.MaxElectionValueLen))
		require.NoError(t, err, "the longest value fits with its start")
		require.NoError(t, long.Resign(ctx))
	})
}

// Resign after Close releases the term in Redis (Close keeps leases for
// Unlock to release); a Proclaim that finds the term gone from Redis ends
// it.
func TestElectionResignAfterCloseAndGoneTerm(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, name := t.Context(), testenv.Unique(t)
		c, other := newClient(t, b.Client), newClient(t, b.Client)
		term, err := c.Election(name).Campaign(ctx, "A")
		require.NoError(t, err)
		require.NoError(t, c.Close())
		require.NoError(t, term.Resign(ctx))
		_, err = other.Election(name).Leader(ctx)
		require.ErrorIs(t, err, reentrant.ErrNoLeader, "Resign after Close released the term")
		require.NoError(t, term.Resign(ctx), "and again: nothing to do")

		term, err = other.Election(name).Campaign(ctx, "B")
		require.NoError(t, err)
		require.NoError(t, b.Client.Del(ctx, scripts.KeysFor(prefix, name).Lock).Err()) // an operator's DEL
		require.ErrorIs(t, term.Proclaim(ctx, "B2"), reentrant.ErrNotHeld)
		require.ErrorIs(t, term.Err(), reentrant.ErrGone, "the term ended when Redis said it was gone")
		require.NoError(t, term.Resign(ctx))
	})
}

// On a Redlock, a Proclaim that reached only a majority is what Leader
// reports, whichever nodes answer.
func TestElectionRedlockNewestValue(t *testing.T) {
	mrs, nodes := redlockNodes(t, 3)
	c := newRedlock(t, nodes)
	ctx, name := t.Context(), testenv.Unique(t)
	term, err := c.Election(name).Campaign(ctx, "A")
	require.NoError(t, err)
	require.Eventually(t, func() bool { // the grant reached every node
		for _, n := range nodes {
			if st, err := scripts.Inspect(ctx, n, scripts.KeysFor(prefix, name)); err != nil || !st.Held {
				return false
			}
		}
		return true
	}, time.Minute, 5*time.Millisecond)
	mrs[2].Close() // the proclaim reaches two of three
	require.NoError(t, term.Proclaim(ctx, "A2"))
	require.NoError(t, mrs[2].Restart())
	for range 20 {
		ld, err := c.Election(name).Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, "A2", ld.Value)
	}
}
