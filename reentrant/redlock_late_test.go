package reentrant_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

// heldGrants holds back a node's qacquire.lua calls (phase 1) while armed,
// before they are sent, so that the test decides when the grant lands:
// after the attempt was decided by the other nodes, after an Unlock.
type heldGrants struct {
	mu    sync.Mutex
	gate  chan struct{} // closed to let the held call go; nil: not armed
	held  chan struct{} // receives when a call is held
	ran   chan error    // the held call's outcome
	armed bool
}

func holdGrants(t *testing.T, node redis.UniversalClient) (*heldGrants, redis.UniversalClient) {
	t.Helper()
	h := &heldGrants{held: make(chan struct{}, 1), ran: make(chan error, 1)}
	o := &redis.Options{Addr: node.(*redis.Client).Options().Addr}
	testenv.ShortTimeouts(time.Second, -1)(o)
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	// Every call an EVALSHA that runs: no NOSCRIPT and EVAL to tell apart.
	require.NoError(t, lua.Load(t.Context(), rdb))
	isGrant := func(cmds []redis.Cmder, pipe bool) bool {
		a := cmds[0].Args()
		return !pipe && len(a) > 1 && (a[1] == scripts.Script("qacquire").Hash() || a[1] == scripts.Source("qacquire"))
	}
	var mine sync.Map // the held commands, to report their outcome
	rdb.AddHook(testenv.Hook{
		Sent: func(cmds []redis.Cmder, pipe bool) {
			if !isGrant(cmds, pipe) {
				return
			}
			h.mu.Lock()
			gate := h.gate
			if gate != nil {
				h.gate = nil // one call only
				mine.Store(cmds[0], true)
			}
			h.mu.Unlock()
			if gate != nil {
				h.held <- struct{}{}
				<-gate
			}
		},
		Done: func(cmds []redis.Cmder, _ bool, err error) {
			if _, ok := mine.LoadAndDelete(cmds[0]); ok {
				h.ran <- err
			}
		},
	})
	return h, rdb
}

// arm holds the next grant; the returned func lets it go and waits until it
// ran, failing the test unless it did without error.
func (h *heldGrants) arm(t *testing.T) (release func()) {
	gate := make(chan struct{})
	h.mu.Lock()
	h.gate = gate
	h.mu.Unlock()
	return func() {
		t.Helper()
		select {
		case <-h.held:
		case <-time.After(10 * time.Second):
			t.Fatal("no grant was held")
		}
		close(gate)
		select {
		case err := <-h.ran:
			require.NoError(t, err, "the premise: the held grant runs on the node")
		case <-time.After(10 * time.Second):
			t.Fatal("the held grant never ran")
		}
	}
}

// A grant that reaches a node after the attempt was decided by the others
// is kept while the lease it belongs to lives and undone once that lease
// is unlocked, whether the grant is a fresh hold (pending) or a reentry's
// level: a level left behind would hold the node for the owner until its
// TTL ran out, so that later acquisitions and reentries on a Redlock
// without a spare node were refused (seen as a flaky reentry on 5 nodes,
// and as the demo's reentry timing out on 3).
func TestRedlockLateGrants(t *testing.T) {
	const ttl = 30 * time.Second // the window (the grants' deadline) is far off
	state := func(t *testing.T, node redis.UniversalClient, name string) lua.State {
		st, err := lua.Inspect(t.Context(), node, lua.KeysFor(prefix, name))
		require.NoError(t, err)
		return st
	}
	awaitState := func(t *testing.T, node redis.UniversalClient, name, want string, ok func(lua.State) bool) {
		t.Helper()
		var st lua.State
		if !testenv.Await(10*time.Second, func() bool { st = state(t, node, name); return ok(st) }) {
			t.Fatalf("the late node never came to %s: %+v", want, st)
		}
	}
	heldBy := func(tok fence.Token, depth int64) func(lua.State) bool {
		return func(st lua.State) bool { return st.Held && !st.Pending && st.Token == tok && st.Depth == depth }
	}
	free := func(st lua.State) bool { return !st.Held }

	eachRedlock(t, 3, func(t *testing.T, s redlockSet) {
		h, late := holdGrants(t, s.nodes[2])
		nodes := []redis.UniversalClient{s.nodes[0], s.nodes[1], late}
		c := newRedlock(t, nodes, reentrant.WithTTL(ttl))

		t.Run("fresh, kept while its lease lives", func(t *testing.T) {
			name := testenv.Unique(t)
			let := h.arm(t)
			l, err := c.Lock(t.Context(), name)
			require.NoError(t, err)
			let()
			awaitState(t, s.nodes[2], name, "hold the lease's token", heldBy(l.Token(), 1))
			require.NoError(t, l.Unlock(t.Context()))
			awaitState(t, s.nodes[2], name, "be free", free)
		})

		t.Run("fresh, landing after Unlock", func(t *testing.T) {
			name := testenv.Unique(t)
			let := h.arm(t)
			l, err := c.Lock(t.Context(), name)
			require.NoError(t, err)
			require.NoError(t, l.Unlock(t.Context()))
			let()
			awaitState(t, s.nodes[2], name, "be free", free)
			require.Equal(t, l.Token(), state(t, s.nodes[2], name).LastToken, "the node remembers the token")
		})

		t.Run("reentry, landing after its Unlock", func(t *testing.T) {
			name := testenv.Unique(t)
			outer, err := c.Lock(t.Context(), name)
			require.NoError(t, err)
			awaitState(t, s.nodes[2], name, "hold the lease's token", heldBy(outer.Token(), 1))
			let := h.arm(t)
			inner, err := c.TryLock(outer.Context(), name)
			require.NoError(t, err)
			require.NoError(t, inner.Unlock(t.Context()))
			let()
			awaitState(t, s.nodes[2], name, "hold only the outer level", heldBy(outer.Token(), 1))
			require.NoError(t, outer.Unlock(t.Context()))
			awaitState(t, s.nodes[2], name, "be free", free)

			// The owner and another can take it again at once.
			again, err := c.TryLock(context.WithoutCancel(outer.Context()), name)
			require.NoError(t, err)
			require.NoError(t, again.Unlock(t.Context()))
		})
	})
}

// A reentry still succeeds when the first majority to answer is one node
// that holds the ownership and one where its hold is gone while the node's
// counter already reached the token (an operator deleted the hash there,
// or the hold expired on that node alone): the token is the ownership's
// own, so the second node is raised to it and the reentry keeps it.
func TestRedlockReentryWhereTheHoldIsGone(t *testing.T) {
	eachRedlock(t, 3, func(t *testing.T, s redlockSet) {
		h, late := holdGrants(t, s.nodes[2])
		c := newRedlock(t, []redis.UniversalClient{s.nodes[0], s.nodes[1], late}, reentrant.WithTTL(30*time.Second))
		name := testenv.Unique(t)
		k := lua.KeysFor(prefix, name)
		outer, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		for i, node := range s.nodes {
			require.True(t, testenv.Await(10*time.Second, func() bool {
				st, err := lua.Inspect(t.Context(), node, k)
				return err == nil && st.Held && !st.Pending && st.Token == outer.Token()
			}), "node %d never held the token", i)
		}
		// Node 0 forgets the hold and keeps its counter, which is the token.
		require.NoError(t, s.nodes[0].Del(t.Context(), k.Lock).Err())
		counter, err := s.nodes[0].Get(t.Context(), k.Counter).Uint64()
		require.NoError(t, err)
		require.Equal(t, uint64(outer.Token()), counter, "the premise: the counter holds the token")

		let := h.arm(t) // node 2 answers after nodes 0 and 1 decided
		inner, err := c.TryLock(outer.Context(), name)
		let() // before any assertion: a held grant would keep Close waiting
		require.NoError(t, err, "one holding node and one whose counter is the token make a majority")
		require.Equal(t, outer.Token(), inner.Token())
		require.Equal(t, int64(2), inner.Depth())
		st, err := lua.Inspect(t.Context(), s.nodes[0], k)
		require.NoError(t, err)
		require.True(t, st.Held && !st.Pending && st.Token == outer.Token(), "node 0 holds the token again: %+v", st)

		require.NoError(t, inner.Unlock(t.Context()))
		require.NoError(t, outer.Unlock(t.Context()))
		for i, node := range s.nodes {
			require.True(t, testenv.Await(10*time.Second, func() bool {
				st, err := lua.Inspect(t.Context(), node, k)
				return err == nil && !st.Held
			}), "node %d still holds the lock", i)
		}
	})
}
