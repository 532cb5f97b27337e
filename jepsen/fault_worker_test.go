//go:build unix

package jepsen_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/internal/tuning"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
)

// faultWorkersConfig sizes the in-process holders of scenarios 2 to 4.
type faultWorkersConfig struct {
	workers, steps int
	gap, ttl       time.Duration
	lockWait       time.Duration            // bound of one Lock
	opTimeout      time.Duration            // bound of one write or unlock
	lockOpts       []reentrant.ClientOption // added to every lock client's
	// newLock, when set, builds worker i's lock client with opts in place
	// of reentrant.New on rdb(i) (a Redlock's, say).
	newLock func(i int, opts []reentrant.ClientOption) (*reentrant.Client, error)
}

// faultTokenMode is a token mode that the scenarios losing the fencing
// counter (a restart without the AOF, a failover) run in, so that the
// summary shows their repeated tokens side by side.
type faultTokenMode struct {
	name   string                   // the subtest's
	suffix string                   // appended to the scenario's name in reports
	opts   []reentrant.ClientOption // added to every lock client's
}

var faultTokenModes = []faultTokenMode{
	{name: "counter", opts: []reentrant.ClientOption{reentrant.WithStrictTokens()}},
	{name: "time", suffix: "/time"}, // the default
}

func (m faultTokenMode) time() bool { return m.suffix != "" }

// faultGrantedAfter reports whether an acquisition completed after at (a
// faultNow reading): one that got its token from the server as it was after
// an event.
func faultGrantedAfter(ops []faultOp, at int64) bool {
	return slices.ContainsFunc(ops, func(op faultOp) bool {
		return op.Kind == faultLock && op.Outcome == faultOK && op.End > at
	})
}

func faultWorkersSize() faultWorkersConfig {
	// A section of about one TTL: a holder cut off from Redis is often
	// still writing when its lease runs out.
	c := faultWorkersConfig{workers: 3, steps: 6, gap: 60 * time.Millisecond, ttl: 300 * time.Millisecond,
		lockWait: time.Second, opTimeout: 500 * time.Millisecond}
	if faultLong() {
		c.workers = 6
	}
	return c
}

// faultRedisOptions are the go-redis options of the holders' lock clients:
// short timeouts, so a frozen, dead or cut-off server turns into errors
// within a lease, and one retry, which the lock scripts must survive.
func faultRedisOptions(addr string) *redis.Options {
	o := &redis.Options{Addr: addr}
	testenv.ShortTimeouts(250*time.Millisecond, 1)(o)
	return o
}

// faultWorkers runs holders as goroutines, each with its own lock client,
// sharing one store and one lock name, until stopped.
type faultWorkers struct {
	hist    faultHistory
	holding atomic.Int64 // proc of the current holder, -1 if none known
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	keys    []string
	name    string // the lock's
}

// faultStartWorkers starts cfg.workers holders. rdb(i) returns holder i's
// go-redis client, which the caller owns and closes (after stop).
func faultStartWorkers(t *testing.T, cfg faultWorkersConfig, rdb func(i int) redis.UniversalClient, store storage.Store) *faultWorkers {
	t.Helper()
	w := &faultWorkers{keys: []string{"a", "b"}, name: testenv.Unique(t)}
	w.holding.Store(-1)
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	for i := range cfg.workers {
		newLock := cfg.newLock
		if newLock == nil {
			newLock = func(i int, opts []reentrant.ClientOption) (*reentrant.Client, error) {
				return reentrant.New(rdb(i), opts...)
			}
		}
		lc, err := newLock(i, cfg.lockOptions())
		if err != nil {
			t.Fatal(err)
		}
		h := cfg.holder(i, lc, store, w.name, w.keys, w.hist.add)
		h.holding = &w.holding
		faultRunHolder(t, ctx, &w.wg, h)
	}
	t.Cleanup(func() { w.stop(t) })
	return w
}

// lockOptions are the options of every holder's lock client: cfg's TTL,
// polls at most a TTL apart, and cfg.lockOpts.
func (cfg faultWorkersConfig) lockOptions() []reentrant.ClientOption {
	return append([]reentrant.ClientOption{reentrant.WithTTL(cfg.ttl), tuning.MaxRetryDelay(cfg.ttl).(reentrant.ClientOption)}, cfg.lockOpts...)
}

// holder is holder proc of lock name on lc, writing keys to store and
// recording its calls with emit, paced as cfg says.
func (cfg faultWorkersConfig) holder(proc int, lc *reentrant.Client, store storage.Store, name string, keys []string, emit func(faultOp)) *faultHolder {
	return &faultHolder{proc: proc, lock: lc, store: store, name: name, keys: keys, steps: cfg.steps, gap: cfg.gap,
		lockWait: cfg.lockWait, opTimeout: cfg.opTimeout, emit: emit}
}

// faultRunHolder runs h's rounds on wg until ctx ends, and closes its lock
// client when the test ends.
func faultRunHolder(t *testing.T, ctx context.Context, wg *sync.WaitGroup, h *faultHolder) {
	t.Cleanup(func() { _ = h.lock.Close() })
	wg.Go(func() {
		for r := 0; h.round(ctx, r); r++ {
		}
	})
}

// awaitGrant waits until some holder was granted the lock after at (a
// faultNow reading), at most a minute, failing t past that: a scenario's
// checks are about holders that got through, before or after a fault,
// which a loaded machine can delay past the scenario's fixed stretches.
func (w *faultWorkers) awaitGrant(t *testing.T, at int64) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !faultGrantedAfter(w.hist.snapshot(), at); {
		if time.Now().After(end) {
			t.Fatalf("no holder was granted the lock within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the holders after their current section and returns the
// history. Every call they make is bounded, so they end within seconds.
func (w *faultWorkers) stop(t *testing.T) []faultOp {
	t.Helper()
	faultStopHolders(t, w.cancel, &w.wg)
	return w.hist.snapshot()
}

// faultStopHolders cancels the holders and waits for them, at most 30 s:
// every call they make is bounded, so they end within seconds.
func faultStopHolders(t *testing.T, cancel func(), wg *sync.WaitGroup) {
	t.Helper()
	cancel()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("holders did not stop within 30s")
	}
}
