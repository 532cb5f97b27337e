//go:build unix

package reentrant_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/redisproc"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

// redlockProcs starts n redis-servers and returns them with a client of
// each with short, context-honouring timeouts.
func redlockProcs(t *testing.T, n int) ([]*redisproc.Server, []redis.UniversalClient) {
	return redlockProcsTimeout(t, n, 200*time.Millisecond)
}

// redlockProcsTimeout is redlockProcs with client timeouts of d.
func redlockProcsTimeout(t *testing.T, n int, d time.Duration) ([]*redisproc.Server, []redis.UniversalClient) {
	t.Helper()
	var srvs []*redisproc.Server
	var nodes []redis.UniversalClient
	for range n {
		s := redisproc.Start(t)
		srvs = append(srvs, s)
		nodes = append(nodes, s.Client(testenv.ShortTimeouts(d, -1)))
	}
	return srvs, nodes
}

// SIGSTOP one of 3 and two of 5: still acquired, renewed and released
// through the majority; a majority stopped: Lock fails with ErrNotAcquired
// when its context ends.
func TestRedlockPausedNodes(t *testing.T) {
	for _, n := range []int{3, 5} {
		srvs, nodes := redlockProcs(t, n)
		const ttl = 1200 * time.Millisecond // renewal has 680 ms to spare: see renewalTTL
		c := newRedlock(t, nodes, reentrant.WithTTL(ttl))
		name := testenv.Unique(t)
		first, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		require.NoError(t, first.Unlock(t.Context()))

		for _, s := range srvs[:n/2] {
			s.Pause()
		}
		l, err := c.Lock(t.Context(), name)
		require.NoError(t, err, "%d of %d stopped", n/2, n)
		require.Greater(t, l.Token(), first.Token())
		in, err := c.Lock(l.Context(), name)
		require.NoError(t, err)
		require.Equal(t, l.Token(), in.Token(), "reentry keeps the token")
		waitRenewed(t, l, ttl) // past its TTL, through the majority
		require.NoError(t, in.Unlock(t.Context()))
		require.NoError(t, l.Unlock(t.Context()))

		srvs[n/2].Pause() // now a majority is stopped
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		start := time.Now()
		_, err = c.Lock(ctx, name)
		cancel()
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
		testenv.Within(t, time.Since(start), 500*time.Millisecond+reentrant.CleanupBudget, "Lock with a majority stopped")
		for _, s := range srvs[:n/2+1] {
			s.Resume()
		}
		l, err = c.Lock(t.Context(), name)
		require.NoError(t, err)
		require.Greater(t, l.Token(), first.Token())
		require.NoError(t, l.Unlock(t.Context()))
	}
}

// A node SIGKILLed and restarted without AOF (its counter gone) at any
// moment, a lock held or not, the others having learned the last token or
// not: tokens never repeat and keep rising.
func TestRedlockRestartWithoutAOF(t *testing.T) {
	srvs, nodes := redlockProcs(t, 3)
	a, b := newRedlock(t, nodes), newRedlock(t, nodes)
	name := testenv.Unique(t)
	var last fence.Token
	for i := range 12 {
		l, err := []*reentrant.Client{a, b}[i%2].Lock(t.Context(), name)
		require.NoError(t, err)
		require.Greater(t, l.Token(), last, "token %d after %d", l.Token(), last)
		last = l.Token()
		err = nil
		if i%3 == 1 { // while held, right after the grant
			srvs[i%3].Crash(0)
			// The grant may have reached a bare majority including the
			// killed node: then the ownership is gone, and Unlock says so.
			if err = l.Unlock(t.Context()); errors.Is(err, reentrant.ErrNotHeld) {
				err = nil
			}
		} else {
			err = l.Unlock(t.Context())
		}
		require.NoError(t, err)
		if i%3 == 2 { // right after the release, before any bump settles
			srvs[i%3].Crash(0)
		}
	}
}

// unreachable is a Redlock node nobody listens at: every call to it fails
// at once, as to a node behind a partition.
func unreachable(t *testing.T) redis.UniversalClient {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// The scenario of Kleppmann's critique, on real processes: a client that
// cannot reach C takes and releases the lock on {A, B}; B is SIGKILLed and
// restarted empty; a client that cannot reach A then takes the lock on
// {B, C}, which never saw the token. It must get a higher token, at once and
// seconds later.
func TestRedlockRestartEmptyBehindAPartition(t *testing.T) {
	for _, wait := range []time.Duration{0, 2 * time.Second} {
		srvs, nodes := redlockProcs(t, 3)
		name := testenv.Unique(t)
		noC := newRedlock(t, []redis.UniversalClient{nodes[0], nodes[1], unreachable(t)})
		noA := newRedlock(t, []redis.UniversalClient{unreachable(t), nodes[1], nodes[2]})
		var first fence.Token
		for range 4 {
			l, err := noC.Lock(t.Context(), name)
			require.NoError(t, err)
			require.Greater(t, l.Token(), first)
			first = l.Token()
			require.NoError(t, l.Unlock(t.Context()))
		}
		require.Empty(t, nodes[2].Get(t.Context(), lua.KeysFor(prefix, name).Counter).Val(), "C never saw a token")
		srvs[1].Crash(0)
		require.Empty(t, nodes[1].Get(t.Context(), lua.KeysFor(prefix, name).Counter).Val(), "B restarted empty")
		time.Sleep(wait)
		l, err := noA.Lock(t.Context(), name)
		require.NoError(t, err)
		require.Greater(t, l.Token(), first, "restarted %v ago: only A remembers %d, and A is out of reach", wait, first)
		require.NoError(t, l.Unlock(t.Context()))
	}
}

// sendClock is a go-redis hook that records, for pipelines that returned
// without error, the latest time one was sent: a bound from above on when
// the last renewal a node confirmed left this process.
type sendClock struct {
	mu        sync.Mutex
	confirmed time.Time
}

func (s *sendClock) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (s *sendClock) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (s *sendClock) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		sent := time.Now()
		err := next(ctx, cmds)
		if err == nil {
			s.mu.Lock()
			if sent.After(s.confirmed) {
				s.confirmed = sent
			}
			s.mu.Unlock()
		}
		return err
	}
}

func (s *sendClock) last() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.confirmed
}

// A majority of real nodes SIGSTOPped, with go-redis's default options
// (which ignore context deadlines on reads and retry): the Redlock lease
// still ends by its local timer, with ErrUnconfirmed, before any node could
// expire the ownership: within the TTL of the last renewal a node confirmed,
// the safety margin and drift allowance being the scheduler's room.
func TestRedlockLossBoundWhileAMajorityIsStopped(t *testing.T) {
	const ttl = 3 * time.Second
	var srvs []*redisproc.Server
	var nodes []redis.UniversalClient
	clock := &sendClock{}
	for i := range 3 {
		s := redisproc.Start(t)
		srvs = append(srvs, s)
		rdb := s.Client() // default options
		if i < 2 {
			// The nodes to be stopped: a renewal confirmed by a majority
			// was confirmed by one of them.
			rdb.AddHook(clock)
		}
		nodes = append(nodes, rdb)
	}
	renewed := make(chan struct{}, 16)
	lost := make(chan time.Time, 1)
	obs := newRedlock(t, nodes, reentrant.WithTTL(ttl), reentrant.WithObserver(func(e reentrant.Event) {
		switch e.Kind {
		case reentrant.Renewed:
			select {
			case renewed <- struct{}{}:
			default:
			}
		case reentrant.Lost:
			lost <- time.Now()
		}
	}))
	l, err := obs.Lock(t.Context(), testenv.Unique(t))
	require.NoError(t, err)
	select {
	case <-renewed: // a renewal was confirmed: the deadline now follows renewals
	case <-time.After(20 * ttl):
		t.Fatal("no renewal was confirmed")
	}
	srvs[0].Pause()
	srvs[1].Pause()
	defer srvs[1].Resume() // before Close, which waits for the calls in flight
	defer srvs[0].Resume()
	paused := time.Now()
	var at time.Time
	select {
	case at = <-lost:
	case <-time.After(20 * ttl):
		t.Fatal("the lease was never reported lost")
	}
	require.ErrorIs(t, l.Err(), reentrant.ErrUnconfirmed)
	last := clock.last()
	require.True(t, last.Before(paused), "no pipeline may be confirmed by a stopped node")
	require.Less(t, at.Sub(last), ttl,
		"the loss must be seen before any node could expire the ownership (last confirmed send %v before the pause)", paused.Sub(last))
}
