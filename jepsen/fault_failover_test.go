//go:build unix

package jepsen_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
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
//
// failover/memory/time runs it with time tokens (the default):
// the promoted replica's counter is behind, but its clock is not, so the
// next token is above every earlier one and nothing repeats.
//
// failover-ack runs the same failover with reentrant.WithReplicaAck: no
// token leaves the primary before the replica has it, so the acquisitions
// made during the isolation are undone (ErrNotReplicated) and no token
// repeats after the promotion.
func TestFaultFailover(t *testing.T) {
	newMemory := func(*testing.T) storage.Store { return memory.New() }
	for _, mode := range faultTokenModes {
		t.Run("memory/"+mode.name, func(t *testing.T) {
			t.Parallel() // see TestMain
			runFaultFailover(t, "failover/memory"+mode.suffix, newMemory, mode, false)
		})
	}
	t.Run("redisstore", func(t *testing.T) {
		t.Parallel() // see TestMain
		rdb := testenv.Redis(t)
		newStore := func(t *testing.T) storage.Store {
			prefix := "redfence:jepsen:" + testenv.Unique(t)
			s, err := redisstore.New(rdb, redisstore.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			faultCleanRedis(t, faultHolderConfig{RedisAddr: rdb.Options().Addr, Prefix: prefix, Name: "unused", Keys: []string{"a", "b"}})
			return s
		}
		runFaultFailover(t, "failover/redisstore", newStore, faultTokenModes[0], false)
	})
	t.Run("ack/memory", func(t *testing.T) {
		t.Parallel() // see TestMain
		runFaultFailover(t, "failover-ack/memory", newMemory, faultTokenModes[0], true)
	})
}

// faultAckTimeout is how long an acquisition waits for the replica with
// WithReplicaAck.
const faultAckTimeout = 2 * time.Second

// runFaultFailover runs the scenario once, on a store from newStore.
//
// Whether the holders themselves were handed a token in the old primary's
// last instants (which the promoted replica then issues again) depends on
// scheduling, which a loaded machine can starve: a token handed to a
// waiter that never claimed it repeats in Redis but in no holder's
// history. So the test takes a probe lock of its own on each side of the
// failover, which shows what the counter does every time: the strict
// counter without the acknowledgement issues the isolated primary's token
// again; time tokens and WithReplicaAck never do.
func runFaultFailover(t *testing.T, scenario string, newStore func(*testing.T) storage.Store, mode faultTokenMode, ack bool) faultReport {
	store := newStore(t)
	isolated, longer := 800*time.Millisecond, 3*time.Second
	if ack {
		// Long enough for the acquisitions made during the isolation to
		// give up waiting for the replica before the primary dies: the
		// end of the current holder's section, faultAckTimeout, a margin.
		isolated, longer = faultAckTimeout+time.Second, faultAckTimeout+3*time.Second
	}
	if faultLong() {
		isolated = longer
	}
	primary := redisproc.Start(t, redisproc.WithAOF("always"))
	replica := redisproc.Start(t, redisproc.WithReplicaOf(primary))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	replica.WaitSync(ctx)
	cfg := faultWorkersSize()
	cfg.lockOpts = mode.opts
	readTimeout := faultRedisOptions("").ReadTimeout
	var spare *redisproc.Server
	if ack {
		primary.WaitAcked(t.Context(), 1)
		// The replica that takes over needs a replica of its own, or every
		// acquisition after the failover is refused and nothing is tested.
		spare = redisproc.Start(t)
		cfg.lockOpts = append(cfg.lockOpts, reentrant.WithReplicaAck(1, faultAckTimeout))
		// A refusal takes faultAckTimeout: Lock must outwait it even when
		// it had waited a while for the lock, or the refusal shows up as
		// a timeout; and the client's ReadTimeout must outlast the WAIT
		// (New checks the latter).
		cfg.lockWait = faultAckTimeout + 3*time.Second
		readTimeout = faultAckTimeout + time.Second
	}

	// The address the holders dial: the primary, then the promoted replica.
	var current atomic.Pointer[string]
	addr := primary.Addr()
	current.Store(&addr)
	var d net.Dialer
	w := faultStartWorkers(t, cfg, func(int) redis.UniversalClient {
		// A *redis.Client, which WithReplicaAck needs: WAIT must run on
		// the connection that ran the acquire script.
		return primary.Client(func(o *redis.Options) {
			*o = *faultRedisOptions(o.Addr)
			o.ReadTimeout = readTimeout
			o.Dialer = func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, *current.Load())
			}
		})
	}, store)
	// probe takes and releases the lock <name>-probe on s directly, with
	// the holders' options, and returns its token.
	probe := func(s *redisproc.Server) (fence.Token, error) {
		c := s.Client(func(o *redis.Options) {
			*o = *faultRedisOptions(o.Addr)
			o.ReadTimeout = readTimeout
		})
		lc, err := reentrant.New(c, cfg.lockOptions()...)
		if err != nil {
			return fence.None, err
		}
		defer lc.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		l, err := lc.TryLock(ctx, w.name+"-probe")
		if err != nil {
			return fence.None, err
		}
		return l.Token(), l.Unlock(ctx)
	}
	// counter reads the fencing counter of the holders' lock on s: its
	// strict counter P:{N}:t, or with time tokens the floor of its slot.
	counter := func(s *redisproc.Server) string {
		c := s.Client()
		defer c.Close()
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		k := scripts.KeysFor(scripts.DefaultPrefix, w.name)
		key := k.Counter
		if mode.time() {
			key = k.Floor
		}
		v, err := c.Get(ctx, key).Result()
		if err != nil {
			return err.Error()
		}
		return v
	}

	time.Sleep(800 * time.Millisecond)
	probeBefore, err := probe(primary)
	if err != nil {
		t.Fatalf("%s: probe on the primary: %v", scenario, err)
	}
	replica.WaitSync(ctx)
	atIsolation := counter(replica)
	replica.Isolate()
	// Taken after Isolate returned, when the primary has cut the link: the
	// replica never sees this token (or, with the acknowledgement, it is
	// refused).
	probeIsolated, probeIsolatedErr := probe(primary)
	time.Sleep(isolated) // the primary goes on issuing tokens alone
	// And at least until the holders have taken a token there (with the
	// acknowledgement, had one refused), which a loaded machine can delay
	// past the isolation's length: the checks below are about them.
	refused := func() bool {
		return slices.ContainsFunc(w.hist.snapshot(), func(op faultOp) bool { return op.Outcome == faultNotReplicated })
	}
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end) &&
		(counter(primary) == atIsolation || ack && !refused()); {
		time.Sleep(50 * time.Millisecond)
	}
	onPrimary := counter(primary)
	replicaAddr := replica.Addr()
	current.Store(&replicaAddr)
	primary.Kill()
	replica.Resume()
	replica.Promote()
	promotedAt := faultNow()
	promoted := counter(replica)
	if ack {
		spare.ReplicaOf(replica)
		spare.WaitSync(ctx)
		replica.WaitAcked(t.Context(), 1)
	}
	probeAfter, err := probe(replica)
	if err != nil {
		t.Fatalf("%s: probe on the promoted replica: %v", scenario, err)
	}
	t.Logf("%s: probe tokens %d before the isolation, %d (%v) on the isolated primary, %d on the promoted replica",
		scenario, probeBefore, probeIsolated, probeIsolatedErr, probeAfter)
	switch {
	case ack:
		if !errors.Is(probeIsolatedErr, reentrant.ErrNotReplicated) {
			t.Errorf("%s: the probe on the isolated primary returned %v, want ErrNotReplicated", scenario, probeIsolatedErr)
		}
		if probeAfter <= probeBefore {
			t.Errorf("%s: the promoted replica issued %d, not above %d", scenario, probeAfter, probeBefore)
		}
	case probeIsolatedErr != nil:
		t.Errorf("%s: the probe on the isolated primary: %v", scenario, probeIsolatedErr)
	case mode.time():
		if probeAfter <= probeIsolated {
			t.Errorf("%s: with time tokens the promoted replica issued %d, not above the isolated primary's %d", scenario, probeAfter, probeIsolated)
		}
	case probeAfter != probeIsolated:
		t.Errorf("%s: the promoted replica issued %d; a counter behind by the isolation should issue the isolated primary's %d again", scenario, probeAfter, probeIsolated)
	}
	// Let the holders go on against the promoted replica until one of them
	// was granted the lock there, for at least 1.2 s and at most a minute (a
	// ceiling: 6 s was within a loaded machine's reach): the
	// replica's queue may still list waiters that were served on the old
	// primary after the isolation, and each is handed the lock in turn and
	// holds it for the claim time before it passes on.
	for start := time.Now(); time.Since(start) < 1200*time.Millisecond ||
		!faultGrantedAfter(w.hist.snapshot(), promotedAt) && time.Since(start) < time.Minute; {
		time.Sleep(50 * time.Millisecond)
	}
	ops := w.stop(t)

	r := faultRecord(t, faultCheck(scenario, ops, faultFinal(t, store, w.keys)))
	// Holders may have taken a token or two from the promoted replica
	// before the test read its counter.
	t.Logf("%s: fencing counter %s at isolation, %s on the primary when it was killed, %s on the promoted replica just after promotion; tokens issued twice: %v; %d writes under them refused, highest accepted %d; %d acquisitions undone unreplicated",
		scenario, atIsolation, onPrimary, promoted, r.Repeated, r.FencedOut, r.Highest, r.NotReplicated)
	if onPrimary == atIsolation {
		t.Errorf("the primary issued no token while the replica was isolated (counter %s): the failover lost nothing", onPrimary)
	}
	// A grant that completed after the promotion came from the promoted
	// replica, even when the Lock call began waiting before it (as most do
	// in the long run, whose holders wait longer).
	after := faultGrantedAfter(ops, promotedAt)
	if !ack && !mode.time() {
		// The probe showed the repeat; the holders may or may not have
		// met it (see runFaultFailover), and either way no stale write
		// may have been accepted (faultRecord).
		return r
	}
	if !ack {
		if r.TokensRepeated != 0 || r.FencedOut != 0 {
			t.Errorf("with time tokens, tokens %v were issued twice and %d writes fenced out", r.Repeated, r.FencedOut)
		}
		if !after {
			t.Errorf("no acquisition succeeded after the failover: that no token repeated proves nothing")
		}
		return r
	}
	// faultRecord has already failed the test on any stale write accepted.
	if r.TokensRepeated != 0 {
		t.Errorf("with WithReplicaAck, tokens %v were issued twice", r.Repeated)
	}
	if r.NotReplicated == 0 {
		t.Errorf("no acquisition was refused with ErrNotReplicated while the replica was isolated")
	}
	if !after {
		t.Errorf("no acquisition succeeded after the failover: that no token repeated proves nothing")
	}
	return r
}
