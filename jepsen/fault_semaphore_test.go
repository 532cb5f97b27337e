//go:build unix

package jepsen_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// Scenario semaphore-pause: more workers than permits share a fenced
// semaphore (reentrant.Semaphore), each a process of its own, against the
// real Redis and a fenced store. Each writes only its slot's key
// (Permit.SlotKey) with its token. Workers are stopped with SIGSTOP inside
// their sections, past their leases, two at a time at most, while the
// others go on; each is resumed once a new holder of its slot has written
// the slot's key with a higher token, and its late writes must be refused
// (fence.ErrStale). A sampler reads the semaphore's state all along, on
// the server's clock, twice over: with Semaphore.Inspect and with a script
// of its own that counts the permits' holds with a positive PTTL; neither
// may ever see more live holders than permits, nor two on one slot. Each
// worker also checks that its Permit's Slot is the slot Redis gave it.
func TestFaultSemaphorePause(t *testing.T) {
	for _, kind := range []string{"redis", "postgres"} {
		name := map[string]string{"postgres": "sqlstore-postgres", "redis": "redisstore"}[kind]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runFaultSemaphore(t, "semaphore-pause/"+name, kind)
		})
	}
}

// faultSemSize sizes a semaphore-pause run.
type faultSemSize struct {
	workers, permits int
	steps            int
	gap, ttl         time.Duration
	pauses           int
	concurrent       int
	pauseFor         time.Duration
	limit            time.Duration
}

func faultSemSizeOf() faultSemSize {
	s := faultSemSize{workers: 6, permits: 3, steps: 3, gap: 30 * time.Millisecond, ttl: time.Second,
		pauses: 3, concurrent: 2, pauseFor: 3 * time.Second, limit: 3 * time.Minute}
	if faultLong() {
		s.workers, s.pauses, s.limit = 8, 10, 10*time.Minute
	}
	return s
}

func runFaultSemaphore(t *testing.T, scenario, kind string) {
	size := faultSemSizeOf()
	base := faultHolderConfig{
		RedisAddr: testenv.RedisAddr(t),
		Store:     kind,
		Prefix:    "redfence:jepsen:" + testenv.Unique(t),
		Name:      testenv.Unique(t),
		Keys:      []string{"res"}, // a permit writes res#slot<N>
		Rounds:    1000,            // a cap: the run ends the workers
		Steps:     size.steps,
		GapMS:     int(size.gap / time.Millisecond),
		TTLMS:     int(size.ttl / time.Millisecond),
	}
	var slotKeys []string
	for i := range size.permits {
		slotKeys = append(slotKeys, fmt.Sprintf("res#slot%d", i))
	}
	clean := base
	clean.Keys = slotKeys
	faultCleanShared(t, clean)
	if kind == "postgres" {
		base.PGURL = testenv.PostgresURL(t)
		base.Table = faultPGTable(t, base.PGURL)
	}
	store, closeStore, err := faultOpenStore(base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeStore)

	var cfgs []faultSharedConfig
	for i := range size.workers {
		c := faultSharedConfig{faultHolderConfig: base, Role: faultPermit, Permits: size.permits}
		c.Proc = i
		cfgs = append(cfgs, c)
	}
	sample, _ := faultSampleSemaphore(t, base, size.permits)
	run := runFaultShared(t, cfgs, faultSharedPlan{
		pauses:     map[string]int{faultPermit: size.pauses},
		concurrent: size.concurrent,
		pauseFor:   size.pauseFor,
		limit:      size.limit,
		keys: func(_ string, gate faultOp) []string {
			return []string{fmt.Sprintf("res#slot%d", gate.Slot)}
		},
	})
	samples := sample()

	late := faultCheckLate(t, run)
	r := faultCheck(scenario, run.ops, faultFinal(t, store, slotKeys))
	// Holders overlap by design: what counts is two believing they held
	// one slot at once, which a pause brings about and fencing answers;
	// and tokens going backwards from one holder of a slot to the next
	// (permits of different slots are granted in any order).
	r.MutexViolations, r.FencedOut = 0, 0
	for s := range size.permits {
		ops := slices.DeleteFunc(slices.Clone(run.ops), func(op faultOp) bool { return op.Slot != s })
		r.MutexViolations += faultOverlaps(ops)
		backwards := faultTokens(ops, &faultReport{})
		for _, op := range ops {
			if op.Kind == faultWrite && op.Outcome == faultStale && backwards[[2]uint64{uint64(op.Proc), op.Token}] {
				r.FencedOut++
			}
		}
	}
	mismatches := 0
	for _, op := range run.ops {
		switch {
		case op.Kind == faultSlotMismatch:
			if mismatches++; mismatches <= 10 {
				r.Anomalies = append(r.Anomalies, fmt.Sprintf("permit of proc %d (token %d): %s", op.Proc, op.Token, op.Err))
			}
		case op.Kind == faultLock && op.Outcome == faultOK && (op.Slot < 0 || op.Slot >= size.permits):
			r.Anomalies = append(r.Anomalies, fmt.Sprintf("permit of proc %d (token %d) on slot %d of %d", op.Proc, op.Token, op.Slot, size.permits))
		case op.Kind == faultWrite && !slices.Contains(slotKeys, op.Key):
			r.Anomalies = append(r.Anomalies, fmt.Sprintf("proc %d wrote key %q, not a slot's", op.Proc, op.Key))
		}
	}
	if mismatches > 10 {
		r.Anomalies = append(r.Anomalies, fmt.Sprintf("%d permits in all whose Slot is not Redis's", mismatches))
	}
	r.Anomalies = append(r.Anomalies, samples.anomalies...)
	faultRecord(t, r)

	t.Logf("%s: %d permits granted; late slot writes refused: %d; %d samples (Inspect and PTTL each), %d with every permit held, at most %d live holders of %d permits",
		scenario, r.Acquisitions, late[faultPermit], samples.n, samples.full, samples.max, size.permits)
	if samples.n == 0 || samples.full == 0 {
		t.Errorf("%s: the sampler never saw every permit held in %d samples: it checked nothing", scenario, samples.n)
	}
}

// faultSemLiveScript counts, on the server's clock, the permits of the
// semaphore whose holders hash is KEYS[1] (owner -> "<slot> <permits>"):
// the holds KEYS[1]:<owner> of its entries that exist (PTTL not -2), and
// returns {count, slots, the number of those holds without an expiry
// (PTTL -1)}. Independent of the library's scripts but for the key layout
// (lua/shared.lua).
var faultSemLiveScript = redis.NewScript(`
local h = redis.call('HGETALL', KEYS[1])
local n, slots, forever = 0, {}, 0
for i = 1, #h, 2 do
  local pttl = redis.call('PTTL', KEYS[1] .. ':' .. h[i])
  if pttl ~= -2 then
    n = n + 1
    slots[#slots + 1] = string.match(h[i + 1], '^(%d+)') or '-1'
    if pttl == -1 then
      forever = forever + 1
    end
  end
end
return {n, slots, forever}`)

// faultSemSamples is what the sampler of a semaphore's state saw.
type faultSemSamples struct {
	n, full, max int
	anomalies    []string
}

// faultSampleSemaphore reads the state of c's semaphore of permits every
// few milliseconds until the returned function is called, which returns
// what it saw: more live holders than permits, two on one slot, a slot out
// of range or a hold without an expiry, by Inspect or by
// faultSemLiveScript, is an anomaly.
func faultSampleSemaphore(t *testing.T, c faultHolderConfig, permits int) (stop func() faultSemSamples, taken *atomic.Int64) {
	rdb := redis.NewClient(&redis.Options{Addr: c.RedisAddr, DisableIdentity: true})
	lc, err := reentrant.New(rdb)
	if err != nil {
		_ = rdb.Close()
		t.Fatal(err)
	}
	sem := lc.Semaphore(c.Name, permits)
	index := scripts.SharedKeys("redfence", c.Name, 's', "").Index
	ctx, cancel := context.WithCancel(context.Background())
	taken = new(atomic.Int64)
	var s faultSemSamples
	bad := func(format string, args ...any) {
		if len(s.anomalies) < 10 {
			s.anomalies = append(s.anomalies, "sample: "+fmt.Sprintf(format, args...))
		}
	}
	checkSlots := func(by string, slots []int) {
		slices.Sort(slots)
		if len(slots) > permits {
			bad("%s: %d live holders of %d permits (slots %v)", by, len(slots), permits, slots)
		}
		if len(slices.Compact(slices.Clone(slots))) != len(slots) {
			bad("%s: two live holders on one slot (slots %v)", by, slots)
		}
		if len(slots) > 0 && (slots[0] < 0 || slots[len(slots)-1] >= permits) {
			bad("%s: a slot out of range (slots %v)", by, slots)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			st, err := sem.Inspect(ctx)
			if err == nil {
				var slots []int
				for _, h := range st.Holders {
					slots = append(slots, h.Slot)
					if h.TTL < 0 { // 0: less than a millisecond left
						bad("Inspect: permit of %s on slot %d with TTL %v", h.Owner, h.Slot, h.TTL)
					}
				}
				checkSlots("Inspect", slots)
				s.n++
				s.max = max(s.max, len(slots))
				if len(slots) >= permits {
					s.full++
				}
			}
			v, err := faultSemLiveScript.Run(ctx, rdb, []string{index}).Slice()
			if err == nil && len(v) == 3 {
				var slots []int
				raw, _ := v[1].([]any)
				for _, x := range raw {
					var n int
					if str, ok := x.(string); ok {
						_, _ = fmt.Sscan(str, &n)
					}
					slots = append(slots, n)
				}
				checkSlots("PTTL", slots)
				if n, _ := v[2].(int64); n != 0 {
					bad("PTTL: %d permits' holds without an expiry", n)
				}
				s.max = max(s.max, len(slots))
			}
			taken.Add(1)
			faultSleep(ctx, 5*time.Millisecond)
		}
	})
	stop = sync.OnceValue(func() faultSemSamples {
		cancel()
		wg.Wait()
		_ = lc.Close()
		_ = rdb.Close()
		slices.SortFunc(s.anomalies, cmp.Compare)
		return s
	})
	t.Cleanup(func() { stop() })
	return stop, taken
}
