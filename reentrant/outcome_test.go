package reentrant_test

// What a call says when Redis is frozen or down: ErrOutcomeUnknown exactly
// when its command may have run, the network error when it sent nothing,
// and a Close that settles (or names) what callers left behind. Every test
// here runs on a real redis-server process.

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// frozenTTL is the TTL of the locks taken while Redis is frozen: far
// longer than any test here waits, so that a lock found free was undone,
// not expired.
const frozenTTL = time.Minute

// frozen starts a server, warms a client of it (go-redis's defaults, which
// ignore context deadlines on reads) with one lock and unlock, and freezes
// the server with SIGSTOP; the server resumes when the test ends, before
// the client closes.
func frozen(t *testing.T, configure ...func(*redis.Options)) (*redisproc.Server, *reentrant.Client) {
	t.Helper()
	srv := redisproc.Start(t)
	c := newClient(t, srv.Client(configure...), reentrant.WithTTL(frozenTTL))
	l, err := c.Lock(t.Context(), testenv.Unique(t)+"/warm")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	srv.Pause()
	t.Cleanup(srv.Resume) // runs before the client's Close
	return srv, c
}

// requireUnknown fails the test unless err is ErrOutcomeUnknown and not
// ErrNotAcquired.
func requireUnknown(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, reentrant.ErrOutcomeUnknown)
	require.NotErrorIs(t, err, reentrant.ErrNotAcquired, "a command that may have run is not reported as refused")
}

// requireFree fails the test unless another client takes name at once on
// srv: nothing holds it, nor waits for it.
func requireFree(t *testing.T, srv *redisproc.Server, name string) {
	t.Helper()
	other := newClient(t, srv.Client())
	l, err := other.TryLock(t.Context(), name)
	require.NoError(t, err, "the lock was not free after Close")
	require.NoError(t, l.Unlock(t.Context()))
}

// The scenario: Lock on a frozen server with a 1 s deadline is
// ErrOutcomeUnknown (the script runs when the server resumes); after
// SIGCONT, Close waits for the undo and returns nil, and the lock is free
// at once, not after its TTL.
func TestFrozenLockIsUnknownAndCloseUndoesIt(t *testing.T) {
	srv, c := frozen(t)
	name := testenv.Unique(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err := c.Lock(ctx, name)
	requireUnknown(t, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	t.Logf("Lock on a frozen server: %v", err)
	srv.Resume()
	start := time.Now()
	require.NoError(t, c.Close())
	t.Logf("Close after SIGCONT: nil in %v", time.Since(start).Round(time.Millisecond))
	requireFree(t, srv, name)
}

// Close while the server is still frozen cannot settle the acquisition:
// its error is ErrOutcomeUnknown and names the lock.
func TestCloseWhileFrozenNamesTheLock(t *testing.T) {
	// A short read timeout keeps the go-redis calls in flight, which
	// Close waits for, from taking the default 3 s per attempt.
	_, c := frozen(t, func(o *redis.Options) { o.ReadTimeout = 300 * time.Millisecond; o.MaxRetries = 1 })
	name := testenv.Unique(t)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Lock(ctx, name)
	requireUnknown(t, err)
	err = c.Close()
	require.ErrorIs(t, err, reentrant.ErrOutcomeUnknown)
	require.Contains(t, err.Error(), strconv.Quote(name))
	t.Logf("Close while frozen: %v", err)
}

// Every operation that changes a lock says ErrOutcomeUnknown when the
// server froze with its command sent: LockMulti, Unlock, Extend, Resign
// and Campaign, as Lock above.
func TestFrozenOperationsAreUnknown(t *testing.T) {
	srv := redisproc.Start(t)
	c := newClient(t, srv.Client(), reentrant.WithTTL(frozenTTL))
	name := testenv.Unique(t)
	held, err := c.Lock(t.Context(), name+"/held")
	require.NoError(t, err)
	term, err := c.Campaign(t.Context(), name+"/election", "v")
	require.NoError(t, err)
	srv.Pause()
	t.Cleanup(srv.Resume)
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	_, err = c.LockMulti(short(), []string{name + "/a", name + "/b"})
	requireUnknown(t, err)
	requireUnknown(t, held.Extend(short(), frozenTTL))
	requireUnknown(t, held.Unlock(short()))
	requireUnknown(t, term.Resign(short()))
	_, err = c.Campaign(short(), name+"/other", "w")
	requireUnknown(t, err)
	srv.Resume()
	// What the unknown acquisitions took is undone once Redis answers.
	require.NoError(t, c.Close())
	requireFree(t, srv, name+"/a")
	requireFree(t, srv, name+"/b")
	requireFree(t, srv, name+"/other")
}

// A call that sent nothing is never ErrOutcomeUnknown: with nothing
// listening, Lock (whose go-redis client retries the dial) returns the
// dial's error; and once Redis is killed, Lock (past the client's first
// checks, so that the acquisition itself is refused its connection) and
// Unlock do too.
func TestRefusedDialIsNotUnknown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	_, err = c.Lock(t.Context(), testenv.Unique(t))
	requireSentNothing(t, err)
	t.Logf("Lock with nothing listening: %v", err)

	srv := redisproc.Start(t)
	c = newClient(t, srv.Client(), reentrant.WithTTL(frozenTTL))
	name := testenv.Unique(t)
	l, err := c.Lock(t.Context(), name)
	require.NoError(t, err)
	srv.Kill()
	_, err = c.Lock(t.Context(), name+"/other")
	requireSentNothing(t, err)
	err = l.Unlock(t.Context())
	requireSentNothing(t, err)
	t.Logf("Unlock after Redis was killed: %v", err)
}

// requireSentNothing fails the test unless err is a refused dial's, and
// neither ErrOutcomeUnknown nor ErrNotAcquired.
func requireSentNothing(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.NotErrorIs(t, err, reentrant.ErrOutcomeUnknown, "nothing was sent")
	require.NotErrorIs(t, err, reentrant.ErrNotAcquired)
	var op *net.OpError
	require.True(t, errors.As(err, &op) && op.Op == "dial", "not the dial's error: %v", err)
	require.False(t, strings.Contains(err.Error(), "outcome unknown"), err.Error())
}

// Close begun while an attempt is in flight on a frozen server waits for
// it: the server resumes, the attempt's grant comes back to a closed
// client, which undoes it before Close returns nil, and the lock is free.
func TestCloseSettlesAnAttemptInFlight(t *testing.T) {
	srv, c := frozen(t)
	name := testenv.Unique(t)
	locked := make(chan error, 1)
	go func() {
		_, err := c.Lock(context.Background(), name) // no deadline: the attempt runs on this goroutine
		locked <- err
	}()
	require.True(t, testenv.Await(10*time.Second, func() bool { return reentrant.Unsettled(c) > 0 }), "no attempt in flight")
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	require.True(t, testenv.Await(10*time.Second, func() bool { return reentrant.Closing(c) }), "Close not begun")
	srv.Resume()
	require.NoError(t, <-closed)
	require.ErrorIs(t, <-locked, reentrant.ErrClosed)
	requireFree(t, srv, name)
}
