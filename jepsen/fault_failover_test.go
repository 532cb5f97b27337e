//go:build unix

package jepsen_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/redisproc"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
	"github.com/redfence/redfence/storage/redisstore"
)

// Scenario 4: failover that loses INCRs of the fencing counter. Holders
// lock on a primary with one replica; the test isolates the replica
// (redisproc's recipe: frozen and its link cut), lets the holders go on so
// the primary issues tokens the replica never sees, kills the primary and
// promotes the replica, and points the holders at it, as Sentinel or a
// virtual IP would. The promoted counter is behind: tokens repeat. The
// stores, which remember the highest token they accepted, must still refuse
// every write older than that; the repeated holders are fenced out until
// the counter passes it again.
func TestFaultFailover(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		runFaultFailover(t, "failover/memory", memory.New())
	})
	t.Run("redisstore", func(t *testing.T) {
		rdb := testenv.Redis(t)
		prefix := "redfence:jepsen:" + testenv.Unique(t)
		s, err := redisstore.New(rdb, redisstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		faultCleanRedis(t, faultHolderConfig{RedisAddr: rdb.Options().Addr, Prefix: prefix, Name: "unused", Keys: []string{"a", "b"}})
		runFaultFailover(t, "failover/redisstore", s)
	})
}

func runFaultFailover(t *testing.T, scenario string, store storage.Store) faultReport {
	isolated := 800 * time.Millisecond
	if faultLong() {
		isolated = 3 * time.Second
	}
	primary := redisproc.Start(t, redisproc.WithAOF("always"))
	replica := redisproc.Start(t, redisproc.WithReplicaOf(primary))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	replica.WaitSync(ctx)

	// The address the holders dial: the primary, then the promoted replica.
	var current atomic.Pointer[string]
	addr := primary.Addr()
	current.Store(&addr)
	var d net.Dialer
	w := faultStartWorkers(t, faultWorkersSize(), func(int) redis.UniversalClient {
		return primary.Client(func(o *redis.Options) {
			*o = *faultRedisOptions(o.Addr)
			o.Dialer = func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, *current.Load())
			}
		})
	}, store)
	counter := func(s *redisproc.Server) string {
		c := s.Client()
		defer c.Close()
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		v, err := c.Get(ctx, lua.KeysFor("redfence", w.name).Fence).Result()
		if err != nil {
			return err.Error()
		}
		return v
	}

	time.Sleep(800 * time.Millisecond)
	replica.WaitSync(ctx)
	atIsolation := counter(replica)
	replica.Isolate()
	time.Sleep(isolated) // the primary goes on issuing tokens alone
	onPrimary := counter(primary)
	replicaAddr := replica.Addr()
	current.Store(&replicaAddr)
	primary.Kill()
	replica.Resume()
	replica.Promote()
	promoted := counter(replica)
	time.Sleep(1200 * time.Millisecond)
	ops := w.stop(t)

	r := faultRecord(t, faultCheck(scenario, ops, faultFinal(t, store, w.keys)))
	// Holders may have taken a token or two from the promoted replica
	// before the test read its counter.
	t.Logf("%s: fencing counter %s at isolation, %s on the primary when it was killed, %s on the promoted replica just after promotion; tokens issued twice: %v; %d writes under them refused, highest accepted %d",
		scenario, atIsolation, onPrimary, promoted, r.Repeated, r.FencedOut, r.Highest)
	if onPrimary == atIsolation {
		t.Errorf("the primary issued no token while the replica was isolated (counter %s): the failover lost nothing", onPrimary)
	}
	if r.TokensRepeated == 0 {
		t.Errorf("no token repeated after promoting a replica behind by %s..%s", atIsolation, onPrimary)
	}
	return r
}
