//go:build unix

package reentrant_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/netfault"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage/redisstore"
)

// The holder's lease must end before Redis can give the lock to anyone
// else, whatever go-redis does. With a default-options client (3 s read
// timeout, 3 retries, context deadlines ignored on reads), a renewal sent to
// a frozen server does not return for many seconds; the lease's context must
// still end before the TTL, measured from before the acquisition was sent.
func TestLeaseEndsBeforeTTLWhileRedisIsFrozen(t *testing.T) {
	srv := redisproc.Start(t)
	rdb := srv.Client() // go-redis defaults
	const ttl = time.Second
	// Renewals every 100 ms: a loaded machine (load 15 in a CI rehearsal)
	// could miss the one renewal a third of the TTL allows before the freeze.
	c := newClient(t, rdb, reentrant.WithTTL(ttl), reentrant.WithRenewInterval(100*time.Millisecond))
	before := time.Now()
	l, err := c.Lock(t.Context(), testenv.Unique(t))
	require.NoError(t, err)
	waitRenewed(t, l, 0) // one renewal confirmed
	srv.Pause()
	paused := time.Now()
	defer srv.Resume() // before Close, which waits for the renewal in flight
	// The promise is the deadline the lease computed: no later than the
	// margin before the key can expire, counted from a send before the
	// pause, and the lease ends once it passes. How soon after it the
	// timer's goroutine runs is the scheduler's; the wait is a ceiling.
	select {
	case <-l.Done():
	case <-time.After(20 * ttl):
		t.Fatal("the lease outlived its TTL by far while Redis was frozen")
	}
	dl := reentrant.LocalDeadline(l)
	require.False(t, time.Now().Before(dl), "the lease ended before its deadline %v", dl)
	require.LessOrEqual(t, dl.Sub(paused), ttl-ttl/10, "the deadline must be TTL - margin after a send before the pause")
	require.GreaterOrEqual(t, dl.Sub(before), ttl-ttl/10, "a renewal confirmed before the pause moved it past the first")
	require.ErrorIs(t, l.Err(), reentrant.ErrUnconfirmed)
	require.Empty(t, repeatedPhrase(l.Err().Error(), 3), "said twice in %q", l.Err())
}

// Without renewal, a lease's context ends at its TTL less the margin: the
// holder learns it may no longer act, and Extend moves that point.
func TestLeaseWithoutRenewalEndsAtItsTTL(t *testing.T) {
	t.Parallel() // see TestMain
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		const ttl = 400 * time.Millisecond
		c := newClient(t, b.Client, reentrant.WithTTL(ttl), reentrant.WithoutRenewal())
		before := time.Now()
		l, err := c.Lock(t.Context(), testenv.Unique(t))
		require.NoError(t, err)
		after := time.Now()
		// The deadline is TTL - margin from the acquisition's send, which
		// lies between before and after: before Redis can expire the key.
		dl := reentrant.LocalDeadline(l)
		require.False(t, dl.Before(before.Add(ttl-ttl/10)), "deadline %v before TTL - margin", dl)
		require.False(t, dl.After(after.Add(ttl-ttl/10)), "deadline %v after TTL - margin", dl)
		awaitDone(t, l, 20*ttl)
		require.False(t, time.Now().Before(dl), "the lease ended before its deadline")
		require.ErrorIs(t, l.Err(), reentrant.ErrUnconfirmed)

		// Extend, a while into a longer lease (1.2 s to spare before it
		// would end, which a loaded scheduler cannot eat), moves the local
		// deadline to a full lease from the Extend.
		const ttl2 = 1500 * time.Millisecond
		l, err = c.Lock(t.Context(), testenv.Unique(t), reentrant.WithTTL(ttl2))
		require.NoError(t, err)
		first := reentrant.LocalDeadline(l)
		time.Sleep(ttl2 / 10)
		extended := time.Now()
		require.NoError(t, l.Extend(t.Context(), ttl2))
		moved := reentrant.LocalDeadline(l)
		require.False(t, moved.Before(extended.Add(ttl2-ttl2/10)), "Extend moves the local deadline")
		require.True(t, moved.After(first), "Extend moves the local deadline later")
		awaitDone(t, l, 20*ttl2)
		require.False(t, time.Now().Before(moved), "the extended lease ended before its deadline")
	})
}

// New refuses a renew interval or margin that cannot keep the lease alive.
func TestRenewalThatCannotMeetTheMarginIsRefused(t *testing.T) {
	_, rdb := testenv.Mini(t)
	for _, opts := range [][]reentrant.ClientOption{
		{reentrant.WithTTL(time.Second), reentrant.WithRenewInterval(950 * time.Millisecond)},
		{reentrant.WithTTL(time.Second), reentrant.WithSafetyMargin(time.Second)},
		{reentrant.WithTTL(time.Second), reentrant.WithSafetyMargin(0)},
		{reentrant.WithTTL(time.Second), reentrant.WithSafetyMargin(700 * time.Millisecond)}, // renew TTL/3 > TTL - margin
	} {
		_, err := reentrant.New(rdb, opts...)
		require.ErrorIs(t, err, reentrant.ErrInvalid)
	}
	_, err := reentrant.New(rdb, reentrant.WithTTL(time.Second), reentrant.WithSafetyMargin(500*time.Millisecond))
	require.NoError(t, err)
}

// An inner Unlock whose reply is lost is retried by go-redis; if the same
// owner reenters before the retry lands, the retry must not release a
// second level (the old script, which remembered only the last request,
// did, and freed a lock one level still relied on).
//
// The order is forced, not timed: the first attempt's reply is held by the
// fault proxy until go-redis gives up on it, and the retry's new
// connection is held by a dial gate until the owner has reentered.
func TestRetriedPartialReleaseAfterReentry(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		p, err := netfault.New(b.Client.Options().Addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		// The read timeout only has to fire on the held reply (held 30 s):
		// a second leaves a loaded machine room for every other reply.
		slow := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: time.Second, MaxRetries: 3,
			MinRetryBackoff: 50 * time.Millisecond, MaxRetryBackoff: 50 * time.Millisecond})
		t.Cleanup(func() { _ = slow.Close() })
		gate := newDialGate()
		slow.AddHook(gate)
		c := newClient(t, slow)
		direct := newClient(t, b.Client) // the same owner, elsewhere
		name := testenv.Unique(t)
		ctx := t.Context()

		// Load the scripts through this client first: on a cold server the
		// held reply would be NOSCRIPT, applied nowhere, and prove nothing.
		warm, err := c.Lock(ctx, name+"-warm")
		require.NoError(t, err)
		require.NoError(t, warm.Unlock(ctx))

		outer, err := c.Lock(ctx, name)
		require.NoError(t, err)
		inner, err := c.Lock(outer.Context(), name)
		require.NoError(t, err)

		conns := p.Stats().Accepted
		p.DelayNext(netfault.Downstream, 30*time.Second)
		gate.arm()
		done := make(chan error, 1)
		go func() { done <- inner.Unlock(ctx) }()
		// The first attempt has run (its reply is held) and go-redis has
		// given up on it: it dials for the retry, held at the gate. The
		// owner reenters in between.
		select {
		case <-gate.dialing:
		case <-time.After(time.Minute):
			t.Fatal("go-redis never dialed for the retry of the held release")
		}
		again, err := direct.Lock(reentrant.WithOwner(ctx, outer.Owner()), name)
		require.NoError(t, err)
		gate.open()
		require.NoError(t, <-done)
		require.Greater(t, p.Stats().Accepted, conns, "go-redis must have retried on a new connection")

		st, err := direct.Inspect(ctx, name)
		require.NoError(t, err)
		require.EqualValues(t, 2, st.Depth, "outer and the new reentry hold; the retry must not have taken one")
		require.ElementsMatch(t, []string{outer.ID(), again.ID()}, st.Levels)
		require.NoError(t, again.Unlock(ctx))
		_, err = direct.TryLock(ctx, name)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired, "the outer level still holds the lock")
		require.NoError(t, outer.Unlock(ctx))
	})
}

// A full release whose reply is lost is retried by go-redis, and the retry
// finds the lock no longer held. While nobody took the lock since (no token
// issued on its counter: the slot's floor, or the strict counter), Unlock
// is answered as its first attempt was: nil. Once another owner took it in
// between, Unlock cannot tell whether its first attempt released the lock,
// and says so: ErrNotHeld saying "release unconfirmed", which is not
// ErrLost, and the other owner's hold is left alone.
//
// The order is forced as in TestRetriedPartialReleaseAfterReentry: the
// first attempt's reply is held by the fault proxy until go-redis gives up
// on it, and the retry's new connection is held by a dial gate while the
// test checks that the first attempt freed the lock, and another owner
// takes it or not.
func TestRetriedReleaseAnsweredAsItsFirst(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		for _, mode := range []struct {
			name string
			opts []reentrant.ClientOption
		}{{"default", nil}, {"strict", []reentrant.ClientOption{reentrant.WithStrictTokens()}}} {
			for _, taken := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/taken=%v", mode.name, taken), func(t *testing.T) {
					retriedRelease(t, b.Client.Options().Addr, b.Client, mode.opts, taken)
				})
			}
		}
	})
}

func retriedRelease(t *testing.T, addr string, rdb *redis.Client, opts []reentrant.ClientOption, taken bool) {
	p, err := netfault.New(addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	slow := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: time.Second, MaxRetries: 3,
		MinRetryBackoff: 50 * time.Millisecond, MaxRetryBackoff: 50 * time.Millisecond})
	t.Cleanup(func() { _ = slow.Close() })
	gate := newDialGate()
	slow.AddHook(gate)
	// A prefix of the test's own: no other name moves its slot's floor.
	// No renewal: nothing but the release may cross the proxy.
	opts = append(opts, reentrant.WithPrefix(testenv.Unique(t)))
	c := newClient(t, slow, append(opts, reentrant.WithoutRenewal())...)
	direct := newClient(t, rdb, opts...)
	ctx, name := t.Context(), "n"

	// Load the scripts through this client first: on a cold server the
	// held reply would be NOSCRIPT, applied nowhere, and prove nothing.
	warm, err := c.Lock(ctx, name+"-warm")
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctx))

	l, err := c.Lock(ctx, name)
	require.NoError(t, err)
	conns := p.Stats().Accepted
	p.DelayNext(netfault.Downstream, 30*time.Second)
	gate.arm()
	done := make(chan error, 1)
	go func() { done <- l.Unlock(ctx) }()
	select {
	case <-gate.dialing:
	case <-time.After(time.Minute):
		t.Fatal("go-redis never dialed for the retry of the held release")
	}
	st, err := direct.Inspect(ctx, name)
	require.NoError(t, err)
	require.False(t, st.Held, "the premise: the first attempt ran and released the lock")
	var other *reentrant.Lease
	if taken {
		other, err = direct.TryLock(ctx, name)
		require.NoError(t, err)
		require.Greater(t, other.Token(), l.Token())
	}
	gate.open()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the retried Unlock never returned")
	}
	require.Greater(t, p.Stats().Accepted, conns, "go-redis must have retried on a new connection")
	if !taken {
		require.NoError(t, err, "nobody took the lock since: the retry is answered as the first attempt")
		require.ErrorIs(t, l.Err(), reentrant.ErrReleased)
		return
	}
	require.ErrorIs(t, err, reentrant.ErrNotHeld)
	require.NotErrorIs(t, err, reentrant.ErrLost)
	require.ErrorContains(t, err, "release unconfirmed")
	st, err = direct.Inspect(ctx, name)
	require.NoError(t, err)
	require.True(t, st.Held && st.Token == other.Token() && st.Depth == 1, "the retry left the other owner's hold alone: %+v", st)
	require.NoError(t, other.Unlock(ctx))
}

// dialGate is a go-redis hook that, once armed, holds every new connection
// until it is opened, and says on dialing when the first such dial began.
type dialGate struct {
	armed   atomic.Bool
	once    sync.Once
	dialing chan struct{}
	gate    chan struct{}
}

func newDialGate() *dialGate {
	return &dialGate{dialing: make(chan struct{}), gate: make(chan struct{})}
}

func (g *dialGate) arm()  { g.armed.Store(true) }
func (g *dialGate) open() { close(g.gate) }

func (g *dialGate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if g.armed.Load() {
			g.once.Do(func() { close(g.dialing) })
			select {
			case <-g.gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return next(ctx, network, addr)
	}
}

func (g *dialGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *dialGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Extend on an inner lease never shortens the lock the outer level holds.
func TestInnerExtendDoesNotShortenTheLock(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c, name := newClient(t, b.Client, reentrant.WithTTL(time.Minute)), testenv.Unique(t)
		outer, inner := nested(t, c, name)
		require.NoError(t, inner.Extend(t.Context(), time.Second))
		st, err := c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.Greater(t, st.TTL, 50*time.Second, "a shorter Extend must leave the lock's TTL alone")
		require.NoError(t, inner.Extend(t.Context(), 10*time.Minute))
		st, err = c.Inspect(t.Context(), name)
		require.NoError(t, err)
		require.Greater(t, st.TTL, 9*time.Minute, "a longer Extend lengthens it, for every level")
		require.NoError(t, outer.Err())
	})
}

// A lock client and a Redis store sharing a prefix, on a name equal to a
// store key: neither touches the other's data.
func TestLockAndStoreSharingAPrefix(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := t.Context()
	name := testenv.Unique(t)
	store, err := redisstore.New(rdb, redisstore.WithPrefix(prefix))
	require.NoError(t, err)
	require.NoError(t, store.Put(ctx, name, []byte("v10"), 10))

	c := newClient(t, rdb)
	l, err := c.Lock(ctx, name)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))

	rec, err := store.Get(ctx, name)
	require.NoError(t, err)
	require.Equal(t, "v10", string(rec.Value))
	require.ErrorIs(t, store.Put(ctx, name, []byte("v3"), 3), fence.ErrStale, "the store must still remember token 10")
}

// A value this library did not write, at a lock's key: every call refuses
// with ErrForeign, keeps go-redis's error type, says nothing of an unknown
// outcome (the script ran and refused), and leaves the value alone.
func TestForeignLockKeyRefusedWithItsType(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		c, name := newClient(t, rdb), testenv.Unique(t)
		k := scripts.KeysFor(prefix, name)
		require.NoError(t, rdb.HSet(ctx, k.Lock, "h", "10", "t", "10", "v", "record").Err())
		for _, call := range []func() error{
			func() error { _, err := c.TryLock(ctx, name); return err },
			func() error { _, err := c.Lock(ctx, name); return err },
			func() error { _, err := c.Inspect(ctx, name); return err },
			func() error { return c.Do(ctx, name, func(context.Context, fence.Token) error { return nil }) },
		} {
			err := call()
			require.ErrorIs(t, err, reentrant.ErrForeign)
			var rerr redis.Error
			require.True(t, errors.As(err, &rerr), "errors.As must find go-redis's error in %v", err)
			require.NotContains(t, err.Error(), "unknown")
			require.NotContains(t, err.Error(), "undo")
			require.NotErrorIs(t, err, reentrant.ErrNotAcquired)
		}
		require.Equal(t, map[string]string{"h": "10", "t": "10", "v": "record"}, rdb.HGetAll(ctx, k.Lock).Val())
		require.EqualValues(t, -1, rdb.PTTL(ctx, k.Lock).Val())
	})
}

// Redis's own errors keep their identity through the lock.
func TestRedisErrorsKeepTheirType(t *testing.T) {
	t.Run("OOM", func(t *testing.T) {
		srv := redisproc.Start(t, redisproc.WithArgs("--maxmemory-policy", "noeviction"))
		rdb := srv.Client()
		require.NoError(t, rdb.ConfigSet(t.Context(), "maxmemory", "1").Err())
		c := newClient(t, rdb)
		_, err := c.TryLock(t.Context(), "n")
		require.Error(t, err)
		var rerr redis.Error
		require.True(t, errors.As(err, &rerr), "%v", err)
		require.True(t, strings.HasPrefix(rerr.Error(), "OOM"), "%v", rerr)
		require.NotErrorIs(t, err, reentrant.ErrForeign)
		require.NotContains(t, err.Error(), "unknown", "an OOM refusal changed nothing")
		require.NoError(t, rdb.ConfigSet(t.Context(), "maxmemory", "0").Err())
		st, err := c.Inspect(t.Context(), "n")
		require.NoError(t, err)
		require.False(t, st.Held)
	})
	t.Run("READONLY", func(t *testing.T) {
		primary := redisproc.Start(t)
		replica := redisproc.Start(t, redisproc.WithReplicaOf(primary))
		replica.WaitSync(t.Context())
		c := newClient(t, replica.Client())
		_, err := c.TryLock(t.Context(), "n")
		require.Error(t, err)
		require.True(t, redis.IsReadOnlyError(err) || strings.Contains(err.Error(), "READONLY"), "%v", err)
		var rerr redis.Error
		require.True(t, errors.As(err, &rerr), "%v", err)
	})
	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close()) // nothing listens there now
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		c := newClient(t, rdb)
		_, err = c.TryLock(t.Context(), "n")
		var op *net.OpError
		require.True(t, errors.As(err, &op), "%v", err)
		require.Equal(t, "dial", op.Op)
		require.NotContains(t, err.Error(), "unknown", "a command that never left has no unknown outcome")
		require.NotContains(t, err.Error(), "may stay held")
	})
}

// The server's maxmemory-policy is checked before the first acquisition.
func TestEvictionPolicyChecked(t *testing.T) {
	for _, c := range []struct {
		policy string
		args   []string
		refuse bool
	}{
		{"allkeys-lru", nil, true},
		{"allkeys-lfu", nil, true},
		{"allkeys-random", nil, true},
		{"volatile-lru", nil, false},
		{"noeviction", nil, false},
		{"allkeys-lru", []string{"--rename-command", "CONFIG", `""`}, true}, // read from INFO instead
	} {
		t.Run(c.policy+strings.Join(c.args, ""), func(t *testing.T) {
			srv := redisproc.Start(t, redisproc.WithArgs(append([]string{"--maxmemory-policy", c.policy}, c.args...)...))
			rdb := srv.Client()
			lc := newClient(t, rdb, reentrant.WithStrictTokens())
			_, err := lc.TryLock(t.Context(), "n")
			if !c.refuse {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, reentrant.ErrEvictionPolicy)
			require.ErrorContains(t, err, c.policy)
			require.Zero(t, rdb.Exists(t.Context(), scripts.KeysFor(prefix, "n").Lock).Val(), "nothing may be written")
			// With time tokens (the default) an evicted key is a lost one,
			// which the clock covers: no check.
			_, err = newClient(t, rdb).TryLock(t.Context(), "t")
			require.NoError(t, err)
			ok := newClient(t, rdb, reentrant.WithStrictTokens(), reentrant.WithEvictionAllowed())
			_, err = ok.TryLock(t.Context(), "n")
			require.NoError(t, err)
		})
	}
}

// Lock honours its context when Redis is frozen: the caller gets its
// deadline back within CleanupBudget, whatever go-redis's timeouts. With
// go-redis's defaults a local timer sees to it; a client with
// ContextTimeoutEnabled runs the call inline and its own i/o deadline does.
func TestLockReturnsAtItsDeadlineWhileRedisIsFrozen(t *testing.T) {
	for name, configure := range map[string]func(*redis.Options){
		"defaults":              func(*redis.Options) {}, // 3 s read timeout, retries
		"ContextTimeoutEnabled": func(o *redis.Options) { o.ContextTimeoutEnabled = true },
	} {
		t.Run(name, func(t *testing.T) {
			srv := redisproc.Start(t)
			c := newClient(t, srv.Client(configure))
			_, err := c.TryLock(t.Context(), "warm") // scripts loaded, policy checked
			require.NoError(t, err)
			srv.Pause()
			defer srv.Resume()
			for _, call := range []func(ctx context.Context) error{
				func(ctx context.Context) error { _, err := c.Lock(ctx, "n"); return err },
				func(ctx context.Context) error { _, err := c.TryLock(ctx, "n"); return err },
				func(ctx context.Context) error { _, err := c.Inspect(ctx, "n"); return err },
			} {
				ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
				start := time.Now()
				err := call(ctx)
				cancel()
				require.ErrorIs(t, err, context.DeadlineExceeded)
				// Without the local timer or the client's deadline, go-redis
				// would hold it 3 s per try.
				testenv.Within(t, time.Since(start), 200*time.Millisecond+reentrant.CleanupBudget, "a call on a frozen Redis")
			}
		})
	}
}

// awaitDone waits for l to end, failing t past ceiling: a bound in the
// lease's own units, large enough for any scheduler, never the promise.
func awaitDone(t *testing.T, l *reentrant.Lease, ceiling time.Duration) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(ceiling):
		t.Fatalf("lease %d did not end within %v", l.Token(), ceiling)
	}
}
