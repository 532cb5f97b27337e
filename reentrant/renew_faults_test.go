//go:build unix

package reentrant_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/redisproc"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

// A renewal pipeline sent to a frozen server (SIGSTOP; go-redis defaults,
// which ignore context deadlines on reads) never returns in time; every
// lease of the batch still ends by its local timer, the margin before
// Redis could expire it.
func TestFrozenServerEndsBatchedLeasesBeforeTTL(t *testing.T) {
	const n, ttl = 200, time.Second
	srv := redisproc.Start(t)
	c := newClient(t, srv.Client(), reentrant.WithTTL(ttl))
	leases := lockMany(t, c, n)
	time.Sleep(ttl / 2) // renewals confirmed
	srv.Pause()
	paused := time.Now()
	defer srv.Resume() // before Close, which waits for the pipeline in flight
	for _, l := range leases {
		awaitDone(t, l, 20*ttl)
		require.ErrorIs(t, l.Err(), reentrant.ErrLost)
		// Every lease ends by TTL - margin after its last confirmed
		// renewal, which was sent before the pause.
		dl := reentrant.LocalDeadline(l)
		require.LessOrEqual(t, dl.Sub(paused), ttl-ttl/10, "lease %d: deadline past TTL - margin after the pause", l.Token())
		require.False(t, time.Now().Before(dl), "lease %d ended before its deadline", l.Token())
	}
}

// A pipeline that hangs does not hold the renewer back: ownerships taken
// meanwhile are renewed in later ticks, while the hung batch's ownerships
// are not sent again and end by their local timer.
func TestRenewerNotHeldBackByHungPipeline(t *testing.T) {
	const ttl = 600 * time.Millisecond
	rdb := testenv.Redis(t)
	h := &traffic{}
	rdb.AddHook(h)
	c := newClient(t, rdb, reentrant.WithTTL(ttl))
	stuck, err := c.Lock(t.Context(), testenv.Unique(t))
	require.NoError(t, err)
	held, release := h.holdNext()
	t.Cleanup(release) // runs before the client's Close, which waits for it
	var hung []string
	select {
	case hung = <-held:
	case <-time.After(ttl):
		t.Fatal("no renewal pipeline was sent")
	}
	require.Equal(t, []string{lua.KeysFor(prefix, stuck.Name()).Lock}, hung)

	h.mu.Lock()
	h.record = true
	h.mu.Unlock()
	fresh, err := c.Lock(t.Context(), testenv.Unique(t))
	require.NoError(t, err)
	select {
	case <-stuck.Done():
	case <-time.After(2 * ttl):
		t.Fatal("the hung batch's lease was not ended by its timer")
	}
	require.ErrorIs(t, stuck.Err(), reentrant.ErrLost)
	time.Sleep(3 * ttl)
	require.NoError(t, fresh.Err(), "a lease taken during the hang must be renewed by later ticks")

	h.mu.Lock()
	defer h.mu.Unlock()
	require.NotEmpty(t, h.batches)
	for _, b := range h.batches {
		require.NotContains(t, b, hung[0], "a renewal in flight must not be sent again")
	}
	release()
}
