package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// testServer starts a redis-server for the test, stopped when it ends.
func testServer(t *testing.T) string {
	t.Helper()
	bin, err := serverBinary("")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v: CI must run the benchmark's tests: install redis-server or set %s", err, serverVar)
		}
		t.Skipf("%v: install redis-server or set %s to run these tests", err, serverVar)
	}
	s, err := startServer(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s.addr
}

func testEnv(t *testing.T, addr string, sys system, cfg config) *env {
	t.Helper()
	reqs := new(atomic.Int64)
	rdb := newClient(addr, reqs)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	lk, err := sys.open(rdb, cfg.ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = lk.close()
		_ = rdb.Close()
		_ = admin.Close()
	})
	return &env{cfg: cfg, sys: sys, lk: lk, rdb: rdb, rdbs: []*redis.Client{rdb}, reqs: reqs, admin: admin, admins: []*redis.Client{admin}}
}

var briefly = config{
	rounds: 1, pairs: 20, duration: 200 * time.Millisecond, check: 300 * time.Millisecond, ttl: 10 * time.Second,
	names: 200, leases: 200, renewTTL: time.Second, // shorter loses leases under -race on 2 cores
	sharedDur: 300 * time.Millisecond,
}

// TestWorkloads runs every workload very briefly on every system and checks
// that the figures are there and plausible.
func TestWorkloads(t *testing.T) {
	addr := testServer(t)
	for _, sys := range systems() {
		t.Run(sys.name, func(t *testing.T) {
			e := testEnv(t, addr, sys, briefly)
			ctx := t.Context()
			if err := checkExclusion(ctx, e.lk, "exclusion", briefly.check); err != nil {
				t.Fatalf("a real lock failed the exclusion check: %v", err)
			}
			got := map[string]metric{}
			for _, w := range workloads() {
				ms, err := w.run(ctx, e)
				if err != nil {
					t.Fatalf("%s: %v", w.name, err)
				}
				for _, m := range ms {
					got[m.group+": "+m.name] = m
				}
			}
			for _, name := range []string{
				w1 + ": pair latency p50", w1 + ": client CPU per pair", w2 + ": pairs/s",
				w3 + ": acquisitions/s", w3 + ": handoff p50", w3 + ": server CPU per acquisition",
				mem + ": per held lock",
			} {
				if m, ok := got[name]; !ok || m.value <= 0 {
					t.Errorf("%s = %v (present: %v), want > 0", name, m.value, ok)
				}
			}
			// SET + the release script's EVALSHA, GET, DEL is the least a pair can cost.
			if m := got[w1+": server commands per pair"]; m.value < 4 {
				t.Errorf("W1 server commands per pair = %.2f, want at least 4: are script-internal commands counted?", m.value)
			}
			if m := got[w1+": client requests per pair"]; m.value < 2 {
				t.Errorf("W1 client requests per pair = %.2f, want at least 2", m.value)
			}
			if strings.HasPrefix(sys.name, "redfence") {
				// One script takes the three names: fewer requests than three Locks.
				m, l := got[wm+": LockMulti: client requests per pair"], got[wm+": 3 x Lock: client requests per pair"]
				if m.value <= 0 || m.value >= l.value {
					t.Errorf("W1m client requests per pair: LockMulti %.2f, 3 x Lock %.2f; want fewer with LockMulti", m.value, l.value)
				}
			}
			if sys.name == "redfence" {
				// The split: calls that run nothing cost less than calls
				// that run the commands, alone or with redfence's checks.
				shipped, alone, empty := got[ws+": script time per pair, redfence's acquire and release"],
					got[ws+": script time per pair, the same commands alone"], got[ws+": script time per pair, two calls that run nothing"]
				if empty.value <= 0 || alone.value <= empty.value || shipped.value <= empty.value {
					t.Errorf("W1s script time per pair: redfence %v, its commands alone %v, empty calls %v; want all > 0, the empty calls least", shipped.value, alone.value, empty.value)
				}
				// The strict counter ran in the same blocks, and the ratio
				// is of those blocks: both present, the ratio near
				// shipped/strict (a median of block ratios, not of the
				// medians, so not equal).
				strict, ratio := got[ws+": script time per pair, redfence-strict's acquire and release"],
					got[ws+": redfence / redfence-strict, median of the blocks' ratios"]
				if strict.value <= empty.value || ratio.value <= 0 {
					t.Errorf("W1s: strict %v (empty calls %v), ratio %v; want the strict pair above the empty calls and a ratio > 0", strict.value, empty.value, ratio.value)
				} else if r := shipped.value / strict.value; ratio.value < r/2 || ratio.value > r*2 {
					t.Errorf("W1s ratio %.2f, the medians' %.2f: want them within a factor 2", ratio.value, r)
				}
				// fenced-lua ran in the same blocks too: its pair costs
				// more than two empty calls, and the ratio to it is near
				// the medians'.
				fl, flr := got[ws+": script time per pair, fenced-lua's acquire and release"],
					got[ws+": redfence / fenced-lua, median of the blocks' ratios"]
				if fl.value <= empty.value || flr.value <= 0 {
					t.Errorf("W1s: fenced-lua %v (empty calls %v), ratio %v; want fenced-lua above the empty calls and a ratio > 0", fl.value, empty.value, flr.value)
				} else if r := shipped.value / fl.value; flr.value < r/2 || flr.value > r*2 {
					t.Errorf("W1s ratio to fenced-lua %.2f, the medians' %.2f: want them within a factor 2", flr.value, r)
				}
			}
			// rw64 and sem8 run on redfence alone; their own checks (no
			// overlap, at most 8 permits, distinct slots) failed the run
			// above if broken.
			_, rwRan := got[wrw+": RWMutex: reader acquisitions/s"]
			_, semRan := got[wsem+": acquisitions/s"]
			if want := sys.name == "redfence"; rwRan != want || semRan != want {
				t.Errorf("rw64 ran: %v, sem8 ran: %v; want %v", rwRan, semRan, want)
			} else if want {
				for _, name := range []string{
					wrw + ": RWMutex: reader acquisitions/s", wrw + ": RWMutex: writes", wrw + ": Lock baseline: reader acquisitions/s",
					wrw + ": Lock baseline: writes", wrw + ": reader acquisitions/s, RWMutex / Lock", wsem + ": acquisitions/s",
					wsem + ": fairness: fewest/most acquisitions per goroutine",
				} {
					if m := got[name]; m.value <= 0 {
						t.Errorf("%s = %v, want > 0", name, m.value)
					}
				}
				if m := got[wrw+": Lock baseline: most readers inside at once"]; m.value != 1 {
					t.Errorf("the plain lock let %v readers in at once, want 1", m.value)
				}
				if m := got[wsem+": most holders at once (limit 8)"]; m.value < 1 || m.value > semPermits {
					t.Errorf("sem8: %v holders at once, want 1 to %d", m.value, semPermits)
				}
			}
			want := map[string]bool{"redfence": true, "redislock": true}[sys.name]
			if m, ok := got[renew+": alive after 3 TTLs, Redis's view"]; ok != want {
				t.Errorf("renewal ran: %v, want %v", ok, want)
			} else if ok && m.text != "200/200" {
				t.Errorf("renewal: %s leases alive, want 200/200", m.text)
			}
		})
	}
}

// noLock grants every lock at once: no exclusion at all.
type noLock struct{}

func (noLock) lock(context.Context, string) (unlocker, error) { return noLock{}, nil }
func (noLock) unlock(context.Context) error                   { return nil }
func (noLock) close() error                                   { return nil }

// overwriteLock is SET without NX: every caller "wins" on real Redis.
type overwriteLock struct{ rdb *redis.Client }

func (o overwriteLock) lock(ctx context.Context, name string) (unlocker, error) {
	return noLock{}, o.rdb.Set(ctx, "overwrite:"+name, "x", time.Second).Err()
}
func (overwriteLock) close() error { return nil }

// neverLock never grants: the check must not pass a lock it never saw work.
type neverLock struct{}

func (neverLock) lock(ctx context.Context, _ string) (unlocker, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (neverLock) close() error { return nil }

// TestExclusionCatchesBrokenLocks feeds the mutual-exclusion check locks
// that are broken in different ways; each must fail it.
func TestExclusionCatchesBrokenLocks(t *testing.T) {
	addr := testServer(t)
	rdb := newClient(addr, nil)
	t.Cleanup(func() { _ = rdb.Close() })
	// floor with a lease shorter than the 1 ms critical section: the lock
	// expires under its holder.
	short, err := floorSystem().open(rdb, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		lk   locker
		want []error // any of them; none: any error
	}{
		{"no-op lock", noLock{}, []error{errOverlap}},
		{"SET without NX", overwriteLock{rdb}, []error{errOverlap}},
		// Its lease runs out under the holder: the check sees a second
		// holder inside, or, when the scheduler lets the first finish
		// before anyone enters, a release that finds the lock gone.
		{"lease shorter than the critical section", short, []error{errOverlap, errNotHeld}},
		{"never grants", neverLock{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkExclusion(t.Context(), tc.lk, "broken", time.Second)
			if err == nil {
				t.Fatal("the exclusion check passed a broken lock")
			}
			ok := len(tc.want) == 0
			for _, w := range tc.want {
				ok = ok || errors.Is(err, w)
			}
			if !ok {
				t.Fatalf("err = %v, want one of %v", err, tc.want)
			}
			t.Log(err)
		})
	}
}

// TestReport checks the cell format: median (min–max) and the median of
// per-round ratios to floor.
func TestReport(t *testing.T) {
	r := newReport([]string{"floor", "x"})
	for round, v := range []float64{1, 2, 4} {
		r.add(round, "floor", []metric{num("W", "n", unitCount, v)})
		r.add(round, "x", []metric{num("W", "n", unitCount, 3*v)})
	}
	// A row that starts with a text cell still gets the unit of its numbers.
	r.add(0, "floor", []metric{text("W", "m", "n/a")})
	r.add(0, "x", []metric{noRatio(num("W", "m", unitBytes, 70.4))})
	var b strings.Builder
	r.write(&b)
	for _, want := range []string{
		"| W | n | 2.00 (1.00–4.00) | 6.00 (3.00–12.00) ×3.00 |",
		"| W | m | n/a | 70 B |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestRedlockNodes runs the benchmark on three nodes: redislock is left
// out, redfence runs as a Redlock and redsync on every node, and the
// server figures are summed over the nodes (redsync's pair is SET NX and
// the release script on each of the three, at least 12 commands; one node
// alone would show 4).
func TestRedlockNodes(t *testing.T) {
	addrs := []string{testServer(t), testServer(t), testServer(t)}
	var out, logw strings.Builder
	all, err := pick(systems(), "redislock,redsync,redfence")
	if err != nil {
		t.Fatal(err)
	}
	wls, err := pickWorkloads("w1,w3,mem")
	if err != nil {
		t.Fatal(err)
	}
	cfg := briefly
	cfg.check = 2 * time.Second // 32 critical sections on a Redlock of a loaded machine
	if err := run(t.Context(), cfg, addrs, all, wls, &out, &logw); err != nil {
		t.Fatalf("run: %v\n%s", err, logw.String())
	}
	rep := out.String()
	for _, want := range []string{"Redlock on 3 independent masters", "| floor |", "redsync", "redfence"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	if strings.Contains(rep, "| redislock |") || !strings.Contains(logw.String(), "redislock runs on one node only") {
		t.Errorf("redislock was not left out:\n%s\n%s", rep, logw.String())
	}
	if strings.Contains(rep, "per held lock") {
		t.Errorf("the memory workload ran on several nodes:\n%s", rep)
	}

	reqs := new(atomic.Int64)
	var rdbs, admins []*redis.Client
	for _, addr := range addrs {
		rdb, admin := newClient(addr, reqs), redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _, _ = rdb.Close(), admin.Close() })
		rdbs, admins = append(rdbs, rdb), append(admins, admin)
	}
	lk, err := redsyncSystem().openN(rdbs, briefly.ttl)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{cfg: briefly, sys: redsyncSystem(), lk: lk, rdb: rdbs[0], rdbs: rdbs, reqs: reqs, admin: admins[0], admins: admins}
	ms, err := uncontended(t.Context(), e)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range ms {
		if m.name == "server commands per pair" {
			found = true
			if m.value < 12 {
				t.Errorf("redsync on 3 nodes: %.2f server commands per pair, want at least 12 (summed over the nodes)", m.value)
			}
		}
	}
	if !found {
		t.Error("W1 reported no server commands per pair")
	}
}

// TestFencedTokens checks the fenced reference systems do what they stand
// for: a token per ownership, higher than every earlier one, also after an
// operator's DEL of the lock key (which frees the lock, and must not reset
// the counter), and no acquisition while the lock is held.
func TestFencedTokens(t *testing.T) {
	addr := testServer(t)
	rdb := newClient(addr, nil)
	t.Cleanup(func() { _ = rdb.Close() })
	for _, lua := range []bool{false, true} {
		sys := fencedSystem(lua)
		t.Run(sys.name, func(t *testing.T) {
			ctx := t.Context()
			lk, err := sys.open(rdb, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			take := func() *fencedLock {
				t.Helper()
				u, err := lk.lock(ctx, "tokens-"+sys.name)
				if err != nil {
					t.Fatal(err)
				}
				return u.(*fencedLock)
			}
			var last int64
			for i := range 3 {
				l := take()
				if l.token <= last {
					t.Fatalf("ownership %d: token %d after %d", i, l.token, last)
				}
				last = l.token
				busy, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
				_, err := lk.lock(busy, "tokens-"+sys.name)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("ownership %d: a second lock while held returned %v, want the wait's deadline", i, err)
				}
				if i == 1 {
					// The operator's way out of a stuck lock.
					if err := rdb.Del(ctx, l.key).Err(); err != nil {
						t.Fatal(err)
					}
					if err := l.unlock(ctx); !errors.Is(err, errNotHeld) {
						t.Fatalf("release after DEL: %v, want %v", err, errNotHeld)
					}
					continue
				}
				if err := l.unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestAgainst runs ./run against HEAD briefly: the earlier commit copied to
// a module of its own and linked beside this tree builds, and the report
// names every kind with a script time and every ratio.
func TestAgainst(t *testing.T) {
	if _, err := serverBinary(""); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v: CI must run the benchmark's tests", err)
		}
		t.Skip(err)
	}
	if err := exec.Command("git", "rev-parse", "--verify", "HEAD").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("git rev-parse HEAD: %v: CI runs in a clone and must run this test", err)
		}
		t.Skipf("not a git checkout with a HEAD (%v): ./run against copies a commit with git archive", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./run", "against", "HEAD", "-pairs", "200", "-blocks", "2")
	ownGroup(cmd, 30*time.Second)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("./run against HEAD: %v\n%s", err, out)
	}
	report := string(out)
	for _, kind := range []string{"HEAD's default", "this tree's default", "this tree with WithStrictTokens"} {
		m := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(kind) + ` +([0-9.]+) us$`).FindStringSubmatch(report)
		if m == nil {
			t.Fatalf("no script time for %q in:\n%s", kind, report)
		}
		if us, err := strconv.ParseFloat(m[1], 64); err != nil || us <= 0 {
			t.Errorf("%q: script time %q, want a positive number", kind, m[1])
		}
	}
	if n := len(regexp.MustCompile(`(?m)^  .* / .*: [0-9.]+ \(middle half [0-9.]+-[0-9.]+\)$`).FindAllString(report, -1)); n != 6 {
		t.Errorf("%d ratio lines, want 6, in:\n%s", n, report)
	}
}
