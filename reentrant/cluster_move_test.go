//go:build unix

package reentrant_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/hashslot"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/redisproc"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

// A lock nobody waits for has no queue key, so from SETSLOT MIGRATING to
// SETSLOT NODE the cluster answers its acquire and release TRYAGAIN (one of
// the two keys they name is missing). A slow move outlasts go-redis's own
// retries, which then return TRYAGAIN; redfence retries on, so every call
// succeeds and keeps its promises: tokens go on by one, a reentry keeps its
// token, a lock held across the move is renewed and stays held.
func TestClusterSlowMoveUncontended(t *testing.T) {
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{})
	cc := c.Client()
	var surfaced atomic.Int64 // TRYAGAIN that go-redis gave up on
	cc.AddHook(testenv.Hook{Done: func(_ []redis.Cmder, pipe bool, err error) {
		if !pipe && err != nil && strings.HasPrefix(err.Error(), "TRYAGAIN") {
			surfaced.Add(1)
		}
	}})
	lc := newClient(t, cc, reentrant.WithTTL(time.Second))
	ctx := t.Context()
	name := fmt.Sprintf("move{%d}", time.Now().UnixNano())
	pair, slot := testenv.SameSlot(prefix, name, 2)
	other := pair[1]
	held, err := lc.Lock(ctx, other)
	require.NoError(t, err)

	var (
		stop   atomic.Bool
		rounds int
		tokens []uint64
		errs   []error
		wg     sync.WaitGroup
	)
	wg.Go(func() {
		for !stop.Load() {
			l, err := lc.Lock(ctx, name)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			tokens = append(tokens, uint64(l.Token()))
			inner, err := lc.TryLock(l.Context(), name)
			if err == nil && inner.Token() != l.Token() {
				err = fmt.Errorf("reentry got token %d, not %d", inner.Token(), l.Token())
			}
			if err == nil {
				_, err = lc.Inspect(ctx, name)
			}
			for _, e := range []error{err, unlockIf(ctx, inner), l.Unlock(ctx)} {
				if e != nil {
					errs = append(errs, e)
				}
			}
			rounds++
		}
	})
	time.Sleep(100 * time.Millisecond)
	from := c.MasterOf(slot)
	to := c.Masters()[0]
	if to == from {
		to = c.Masters()[1]
	}
	st := c.MigrateSlot(slot, to, 1, 300*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	stop.Store(true)
	wg.Wait()

	require.Empty(t, errs, "no caller may see the move")
	for i := 1; i < len(tokens); i++ {
		require.Equal(t, tokens[i-1]+1, tokens[i], "tokens go on by one")
	}
	assert.NoError(t, held.Err(), "the lock held across the move stays held")
	assert.NoError(t, held.Extend(ctx, time.Second))
	assert.NoError(t, held.Unlock(ctx))
	assert.Positive(t, surfaced.Load(), "go-redis gave up on TRYAGAIN at least once: the move outlasted its retries")
	t.Logf("SUMMARY cluster-slow-move keys=%d batches=%d migrate_ms=%d rounds=%d tryagain_after_go_redis=%d caller_errors=%d",
		st.Keys, st.Batches, st.Took.Milliseconds(), rounds, surfaced.Load(), len(errs))
}

func unlockIf(ctx context.Context, l *reentrant.Lease) error {
	if l == nil {
		return nil
	}
	return l.Unlock(ctx)
}

// A release that runs on a slot's new primary before the slot is handed
// over (the keys have moved, SETSLOT NODE has not come) publishes there,
// while the waiter's subscription is still on the old primary: the message
// reaches nobody. The waiter's poll gets the lock all the same.
func TestClusterHandoffDuringMoveIsPolled(t *testing.T) {
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{})
	ctx := t.Context()
	holder := newClient(t, c.Client())
	waiter := newClient(t, c.Client())
	name := fmt.Sprintf("polled{%d}", time.Now().UnixNano())
	slot := hashslot.Of(lua.KeysFor(prefix, name).Lock)
	from := c.MasterOf(slot)
	to := c.Masters()[0]
	if to == from {
		to = c.Masters()[1]
	}
	held, err := holder.Lock(ctx, name)
	require.NoError(t, err)
	type got struct {
		l   *reentrant.Lease
		err error
		at  time.Time
	}
	waited := make(chan got, 1)
	go func() {
		l, err := waiter.Lock(ctx, name)
		waited <- got{l, err, time.Now()}
	}()
	shardChannels := func(s *redisproc.Server) []string {
		v, err := s.Client().Do(ctx, "PUBSUB", "SHARDCHANNELS", prefix+":c:*").StringSlice()
		require.NoError(t, err)
		return v
	}
	require.Eventually(t, func() bool { return len(shardChannels(from)) == 1 }, 5*time.Second, 5*time.Millisecond,
		"the waiter subscribes on the slot's primary")

	type released struct {
		at            time.Time
		subsFrom, sub int
		err           error
	}
	rel := make(chan released, 1)
	go func() {
		// Once every key is on the new primary, release: it runs there.
		for from.Client().ClusterCountKeysInSlot(ctx, int(slot)).Val() != 0 {
			time.Sleep(time.Millisecond)
		}
		r := released{subsFrom: len(shardChannels(from)), sub: len(shardChannels(to)), at: time.Now()}
		r.err = held.Unlock(ctx)
		rel <- r
	}()
	c.MigrateSlot(slot, to, 100, 600*time.Millisecond)
	r := <-rel
	require.NoError(t, r.err)
	require.Equal(t, 1, r.subsFrom, "the waiter's subscription was still on the old primary")
	require.Zero(t, r.sub, "nobody listened on the new primary")
	g := <-waited
	require.NoError(t, g.err)
	// The release handed the lock over with the next token, but the claim
	// may come too late: with the queue emptied, the claim names a missing
	// key and gets TRYAGAIN until SETSLOT NODE. The handed lock then
	// expires after the claim time and the waiter's poll takes it afresh.
	require.Greater(t, g.l.Token(), held.Token())
	took := g.at.Sub(r.at)
	// A poll (every 250 ms by default, plus jitter) takes it once the
	// handed lock's claim time (500 ms) and the SETSLOT pause (600 ms) are
	// over; without the poll the waiter would wait for its context (here,
	// the test's) or, polling at the longest delay, 5 s.
	testenv.Within(t, took, 600*time.Millisecond+reentrant.DefaultHandoffTimeout/2+reentrant.DefaultHandoffTimeout/4+reentrant.DefaultRetryJitter,
		"the waiter's poll after a lost handoff message")
	require.NoError(t, g.l.Unlock(ctx))
	t.Logf("SUMMARY cluster-move-lost-message handoff_ms=%.1f tokens_skipped=%d poll_interval_ms=250 claim_ms=500 setslot_pause_ms=600",
		float64(took)/1e6, g.l.Token()-held.Token()-1)
}
