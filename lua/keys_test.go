//go:build unix

package lua_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/hashslot"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

var awkwardNames = []string{
	"plain", "}", "{", "{}", "}{", "a}b", "{a}", "}}}", "{{{", "%", "%7D", "%7B", "%25",
	"x{y}z", "caf\u00e9", "\x00", "a\x00}", "line\nbreak", strings.Repeat("}", 40),
}

func TestKeysShareOneSlot(t *testing.T) {
	for _, name := range awkwardNames {
		k := scripts.KeysFor("redfence", name)
		want := testenv.Slot(k.Lock)
		for _, key := range []string{k.Queue, k.Counter, k.Forced, k.Floor} {
			require.Equal(t, want, testenv.Slot(key), "name %q: %s and %s in different slots", name, k.Lock, key)
		}
		if !strings.ContainsAny(name, "{}%") {
			require.Equal(t, testenv.Slot("{"+name+"}"), want, "names without braces keep their natural slot")
		}
	}
}

// No two names share a key, and no key of one name is another's: the
// floor, shared by the names of a slot, is the only key two names have in
// common.
func TestKeysAreOneToOne(t *testing.T) {
	seen := map[string]string{}
	floors := map[string]bool{}
	for _, name := range awkwardNames {
		k := scripts.KeysFor("p", name)
		floors[k.Floor] = true
		for _, key := range []string{k.Lock, k.Queue, k.Counter, k.Forced} {
			if other, dup := seen[key]; dup {
				t.Fatalf("names %q and %q share key %s", name, other, key)
			}
			seen[key] = name
		}
	}
	for floor := range floors {
		require.NotContains(t, seen, floor, "a floor is no name's own key")
	}
}

func FuzzKeys(f *testing.F) {
	for _, n := range awkwardNames {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if name == "" { // KeysFor wants a non-empty name
			return
		}
		k := scripts.KeysFor("redfence", name)
		want := testenv.Slot(k.Lock)
		for _, key := range []string{k.Queue, k.Counter, k.Forced, k.Floor} {
			if testenv.Slot(key) != want {
				t.Fatalf("name %q: %s in slot %d, %s in %d", name, k.Lock, want, key, testenv.Slot(key))
			}
		}
		if strings.Count(k.Lock, "{") != 1 || strings.Count(k.Lock, "}") != 1 {
			t.Fatalf("name %q: braces leaked into %s", name, k.Lock)
		}
	})
}

// go-redis computes slots in an internal package, so the authority here is
// Redis itself: a cluster-enabled redis-server answers CLUSTER KEYSLOT.
// Every key of a lock must land in one slot, whatever the name, and the
// test's CRC16 must agree with the server's.
func TestKeysShareOneSlotOnRealCluster(t *testing.T) {
	srv := redisproc.Start(t, redisproc.WithArgs("--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf"))
	rdb := srv.Client()
	for _, name := range awkwardNames {
		k := scripts.KeysFor("redfence", name)
		want, err := rdb.ClusterKeySlot(t.Context(), k.Lock).Result()
		require.NoError(t, err)
		require.EqualValues(t, testenv.Slot(k.Lock), want, "CRC16 disagrees with Redis for %q", k.Lock)
		for _, key := range []string{k.Queue, k.Counter, k.Forced, k.Floor} {
			got, err := rdb.ClusterKeySlot(t.Context(), key).Result()
			require.NoError(t, err)
			require.Equal(t, want, got, "name %q: %s and %s in different slots", name, k.Lock, key)
		}
	}
}

// A sharded waiter is told with SPUBLISH on its shard channel, a classic
// one with PUBLISH; the member records which. (Real Redis 7: miniredis has
// no SPUBLISH, and the standalone path never asks for it.)
func TestShardedWaiterIsToldWithSPUBLISH(t *testing.T) {
	r := newQueueRig(t, testenv.Backend{Name: "redis", Client: testenv.Redis(t)})
	ch := "redfence:c:" + hashslot.Tag(hashslot.Of(r.k.Lock)) + ":" + testenv.Unique(t)
	ps := r.rdb.SSubscribe(r.ctx, ch)
	defer ps.Close()
	_, err := ps.Receive(r.ctx)
	require.NoError(t, err)

	first := r.acquire("o1", "l1", nil)
	w := &scripts.Waiter{Channel: ch, Claim: 5 * time.Second, Queue: time.Minute, Sharded: true}
	require.False(t, r.acquire("o2", "l2", w).OK)
	q := r.rdb.ZRange(r.ctx, r.k.Queue, 0, -1).Val()
	require.Len(t, q, 1)
	require.True(t, strings.HasSuffix(q[0], "\ns"+ch), "member %q records a shard channel", q[0])

	require.Equal(t, scripts.Released{}, r.release("o1", first.Token, "l1"))
	select {
	case m := <-ps.Channel():
		require.Equal(t, ch, m.Channel)
		require.Equal(t, "l2 2", m.Payload)
	case <-time.After(30 * time.Second):
		t.Fatal("no SPUBLISH on the waiter's shard channel")
	}
	require.Empty(t, r.unexpected(), "nothing on classic channels")
}
