//go:build unix

package jepsen_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/internal/tuning"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
)

// The worker processes of the read-write lock and semaphore scenarios
// (fault_rw_test.go, fault_semaphore_test.go), and the run that starts,
// pauses and resumes them.
//
// A worker loops over sections, as a lock holder does (fault_holder_test.go):
// it takes its lease (a writer's, a reader's or a permit), makes its first
// step, prints {"kind":"gate"} and waits for a line on stdin ("go", or
// "last": this section is its last), makes the section's other steps and
// unlocks. A writer's step writes every key with its token; a permit's
// writes its slot's keys (Permit.SlotKey) with its token; a reader's reads
// every key with storage.GetAt at its epoch. Every step is made even after
// the lease reports itself lost, like a client that never checks: those
// are the writes and reads fencing must refuse.

// Kinds of a reader's operations, beside faultLock, faultWrite and
// faultUnlock (a writer's and a permit's).
const (
	faultRLock   = "rlock"   // a read lease; Token its epoch
	faultRead    = "read"    // storage.GetAt at the epoch; Read the record's token
	faultRUnlock = "runlock" // a read lease's unlock
	// faultAbsent is a read's outcome when the key has no value and none
	// was written above the epoch (storage.ErrNotFound).
	faultAbsent = "absent"
	// faultSlotMismatch is a permit whose Slot is not the one Redis gave
	// it (Inspect's): never expected.
	faultSlotMismatch = "slot_mismatch"
)

// Roles of a worker.
const (
	faultWriter = "writer" // RWMutex.Lock
	faultReader = "reader" // RWMutex.RLock
	faultPermit = "permit" // Semaphore.Acquire
)

// faultSharedConfig configures one worker process.
type faultSharedConfig struct {
	faultHolderConfig        // the name, the store, the keys, the pace; Rounds is a cap
	Role              string `json:"role"`
	Permits           int    `json:"permits,omitempty"` // the semaphore's count
}

const faultSharedConfigVar = "REDFENCE_FAULT_SHARED_CONFIG"

// faultSharedWorker is one worker's loop.
type faultSharedWorker struct {
	cfg       faultSharedConfig
	rw        *reentrant.RWMutex
	sem       *reentrant.Semaphore
	store     storage.Store
	gap       time.Duration
	lockWait  time.Duration // how long one acquisition may wait
	opTimeout time.Duration // bound of one write, read or unlock
	emit      func(faultOp)
	// gate is called after the section's first step, holding the lease;
	// false says the section is the worker's last.
	gate func(tok fence.Token, slot int) bool
}

// round runs one section and reports whether the worker goes on.
func (w *faultSharedWorker) round(ctx context.Context, round int) bool {
	proc, reader := w.cfg.Proc, w.cfg.Role == faultReader
	lockKind, unlockKind := faultLock, faultUnlock
	if reader {
		lockKind, unlockKind = faultRLock, faultRUnlock
	}
	// The wait is bounded by a timer that cancels only the wait: a
	// deadline on the lease's context would end the lease.
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	waiting := time.AfterFunc(w.lockWait, rcancel)
	start, wall := faultNow(), time.Now().UnixNano()
	var (
		l    *reentrant.Lease
		err  error
		slot int
		keys = w.cfg.Keys
	)
	switch w.cfg.Role {
	case faultWriter:
		l, err = w.rw.Lock(rctx)
	case faultReader:
		l, err = w.rw.RLock(rctx)
	default:
		var p *reentrant.Permit
		if p, err = w.sem.Acquire(rctx); err == nil {
			l, slot, keys = p.Lease, p.Slot(), nil
			for _, k := range w.cfg.Keys {
				keys = append(keys, p.SlotKey(k))
			}
		}
	}
	waiting.Stop()
	op := faultOp{Proc: proc, Kind: lockKind, Outcome: faultOutcome(faultLock, err), Start: start, End: faultNow(), Wall: wall, Slot: slot}
	if err != nil {
		op.Err = err.Error()
		w.emit(op)
		return faultSleep(ctx, 20*time.Millisecond)
	}
	tok := l.Token()
	op.Token = uint64(tok)
	w.emit(op)
	if w.sem != nil {
		w.checkSlot(l, slot)
	}
	var lostAt atomic.Int64
	context.AfterFunc(l.Context(), func() {
		if errors.Is(context.Cause(l.Context()), reentrant.ErrNotHeld) {
			lostAt.Store(faultNow())
		}
	})

	more, seq := true, 0
	for step := range w.cfg.Steps {
		switch {
		case step == 1:
			more = w.gate(tok, slot)
		case step > 0:
			faultSleep(ctx, w.gap)
		}
		for _, k := range keys {
			seq++
			if reader {
				w.read(k, tok, lostAt.Load() != 0)
			} else {
				w.write(k, fmt.Sprintf("%s%d-r%d-t%d-s%d", w.cfg.Role[:1], proc, round, tok, seq), tok, slot, lostAt.Load() != 0)
			}
		}
	}

	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.opTimeout)
	start, wall = faultNow(), time.Now().UnixNano()
	err = l.Unlock(uctx)
	cancel()
	op = faultOp{Proc: proc, Kind: unlockKind, Token: uint64(tok), Outcome: faultOutcome(faultUnlock, err), Start: start, End: faultNow(),
		Wall: wall, LostAt: lostAt.Load(), Slot: slot}
	if err != nil {
		op.Err = err.Error()
	}
	w.emit(op)
	// A short think time, so the waiters a release woke get their turn.
	return faultSleep(ctx, 5*time.Millisecond+rand.N(20*time.Millisecond)) && more
}

// checkSlot reports a permit whose Slot differs from the slot Inspect says
// Redis gave its owner.
func (w *faultSharedWorker) checkSlot(l *reentrant.Lease, slot int) {
	ctx, cancel := context.WithTimeout(context.Background(), w.opTimeout)
	defer cancel()
	st, err := w.sem.Inspect(ctx)
	if err != nil {
		return // not a finding: the sampler and the oracle check the rest
	}
	for _, h := range st.Holders {
		if h.Owner == string(l.Owner()) && h.Slot != slot {
			w.emit(faultOp{Proc: w.cfg.Proc, Kind: faultSlotMismatch, Token: uint64(l.Token()), Slot: slot, Start: faultNow(),
				Err: fmt.Sprintf("Permit.Slot is %d, Redis holds the permit on slot %d", slot, h.Slot)})
		}
	}
}

func (w *faultSharedWorker) write(key, value string, tok fence.Token, slot int, afterLoss bool) {
	// Not the lease's context: a holder that ignores loss writes anyway.
	ctx, cancel := context.WithTimeout(context.Background(), w.opTimeout)
	defer cancel()
	start, wall := faultNow(), time.Now().UnixNano()
	err := w.store.Put(ctx, key, []byte(value), tok)
	op := faultOp{Proc: w.cfg.Proc, Kind: faultWrite, Key: key, Value: value, Token: uint64(tok), Outcome: faultOutcome(faultWrite, err),
		Start: start, End: faultNow(), Wall: wall, AfterLoss: afterLoss, Slot: slot}
	if err != nil {
		op.Err = err.Error()
	}
	w.emit(op)
}

func (w *faultSharedWorker) read(key string, epoch fence.Token, afterLoss bool) {
	ctx, cancel := context.WithTimeout(context.Background(), w.opTimeout)
	defer cancel()
	start, wall := faultNow(), time.Now().UnixNano()
	rec, err := storage.GetAt(ctx, w.store, key, epoch)
	op := faultOp{Proc: w.cfg.Proc, Kind: faultRead, Key: key, Token: uint64(epoch), Start: start, End: faultNow(), Wall: wall, AfterLoss: afterLoss}
	switch {
	case err == nil:
		op.Outcome, op.Read, op.Value = faultOK, uint64(rec.Token), string(rec.Value)
	case errors.Is(err, fence.ErrStale):
		op.Outcome = faultStale
	case errors.Is(err, storage.ErrNotFound):
		op.Outcome = faultAbsent
	default:
		op.Outcome = faultUnknown
	}
	if err != nil {
		op.Err = err.Error()
	}
	w.emit(op)
}

// TestHelperSharedProcess is not a test: the read-write lock and semaphore
// scenarios re-execute the test binary with REDFENCE_FAULT_HELPER=shared to
// run their workers as processes they can SIGSTOP. Without the variable it
// returns at once.
func TestHelperSharedProcess(t *testing.T) {
	if os.Getenv(faultHelperVar) != "shared" {
		return
	}
	var c faultSharedConfig
	if err := json.Unmarshal([]byte(os.Getenv(faultSharedConfigVar)), &c); err != nil {
		t.Fatalf("%s: %v", faultSharedConfigVar, err)
	}
	store, closeStore, err := faultOpenStore(c.faultHolderConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	ttl := time.Duration(c.TTLMS) * time.Millisecond
	rdb := redis.NewClient(&redis.Options{Addr: c.RedisAddr, DisableIdentity: true})
	defer rdb.Close()
	lc, err := reentrant.New(rdb, reentrant.WithTTL(ttl), tuning.MaxRetryDelay(ttl).(reentrant.ClientOption))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()

	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(op faultOp) {
		mu.Lock()
		defer mu.Unlock()
		if err := enc.Encode(op); err != nil {
			os.Exit(3) // the test is gone
		}
	}
	stdin := bufio.NewReader(os.Stdin)
	w := &faultSharedWorker{cfg: c, store: store, gap: time.Duration(c.GapMS) * time.Millisecond,
		lockWait: 10 * time.Second, opTimeout: 5 * time.Second, emit: emit,
		gate: func(tok fence.Token, slot int) bool {
			emit(faultOp{Proc: c.Proc, Kind: "gate", Token: uint64(tok), Slot: slot, Start: faultNow()})
			line, err := stdin.ReadString('\n')
			if err != nil {
				os.Exit(3) // stdin closed: the test is gone
			}
			return line != "last\n"
		}}
	if c.Role == faultPermit {
		w.sem = lc.Semaphore(c.Name, c.Permits)
	} else {
		w.rw = lc.RWMutex(c.Name)
	}
	ctx := context.Background()
	for r := 0; r < c.Rounds && w.round(ctx, r); r++ {
	}
	emit(faultOp{Proc: c.Proc, Kind: "done", Start: faultNow()})
}

// faultSharedPlan says how a run pauses its workers.
type faultSharedPlan struct {
	pauses     map[string]int // how many workers of each role to stop
	concurrent int            // at most this many stopped at once
	pauseFor   time.Duration  // each stop lasts at least this
	limit      time.Duration  // bound of the whole run
	// keys are the keys that writes with a token above a paused worker's
	// must all have reached before it is resumed (it is overtaken then),
	// given its gate.
	keys func(role string, gate faultOp) []string
}

// faultSharedPause is one SIGSTOP/SIGCONT of a worker.
type faultSharedPause struct {
	faultPause          // proc, token (a reader's epoch), stopped, resumed, overtaken
	role       string   // the worker's
	slot       int      // a permit's
	keys       []string // the keys whose overtaking was waited for
	done       bool     // the worker unlocked after SIGCONT: its late section is over
}

type faultSharedRun struct {
	ops    []faultOp
	pauses []faultSharedPause
}

// runFaultShared runs a worker process per cfg and, at their gates, stops
// workers with SIGSTOP as plan says: each until writes with higher tokens
// than its own (a writer's or a permit's token, a reader's epoch) have
// been accepted on every one of its keys, and at least plan.pauseFor; then
// SIGCONT. Once every stop is over and the stopped workers have finished
// their sections, every gate answers "last" and the workers end. It
// returns every operation and the pauses. Every process it starts is
// killed, by PID, when the test ends.
func runFaultShared(t *testing.T, cfgs []faultSharedConfig, plan faultSharedPlan) faultSharedRun {
	t.Helper()
	events := make(chan faultChildEvent, 64)
	quit := make(chan struct{})
	var children []*faultChild
	t.Cleanup(func() {
		close(quit)
		for _, c := range children {
			_ = c.stdin.Close()
			_ = c.cmd.Process.Kill() // SIGKILL ends a stopped process too
			select {
			case <-c.exited:
			case <-time.After(10 * time.Second):
				t.Errorf("worker %d (pid %d) not reaped within 10s of SIGKILL", c.id, c.cmd.Process.Pid)
			}
		}
	})
	role, child := map[int]string{}, map[int]*faultChild{}
	for _, cfg := range cfgs {
		c := faultStartHelper(t, cfg.Proc, "shared", "TestHelperSharedProcess", faultSharedConfigVar, cfg, events, quit)
		role[cfg.Proc], child[cfg.Proc] = cfg.Role, c
		children = append(children, c)
	}
	want := 0
	for _, n := range plan.pauses {
		want += n
	}

	hist := &faultHistory{}
	maxAccepted := map[string]uint64{}
	var (
		pauses       []*faultSharedPause
		stopped      = map[int]*faultSharedPause{} // by proc, while stopped
		byRole       = map[string]int{}
		acquisitions int
		sinceResume  = 2 // acquisitions since the last SIGCONT
		finishing    bool
		live         = len(children)
	)
	canOvertake := func(c *faultChild) bool {
		for _, o := range children {
			if o != c && !o.done && stopped[o.id] == nil && role[o.id] != faultReader {
				return true
			}
		}
		return false
	}
	reply := func(c *faultChild, line string) {
		if _, err := io.WriteString(c.stdin, line); err != nil {
			t.Logf("worker %d: gate: %v", c.id, err)
		}
	}
	deadline := time.NewTimer(plan.limit)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for live > 0 {
		select {
		case ev := <-events:
			c := ev.child
			switch {
			case ev.exit:
				live--
				if ev.err != nil || !c.done {
					t.Errorf("worker %d exited (%v) without finishing; its output:\n%s", c.id, ev.err, c.noise.String())
				}
			case ev.op.Kind == "done":
				c.done = true
			case ev.op.Kind == "gate":
				r := role[c.id]
				if finishing {
					reply(c, "last\n")
					break
				}
				if len(stopped) >= plan.concurrent || byRole[r] >= plan.pauses[r] || acquisitions < 2 || sinceResume < 2 || !canOvertake(c) {
					reply(c, "go\n")
					break
				}
				if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatalf("SIGSTOP worker %d: %v", c.id, err)
				}
				if err := testenv.WaitStopped(c.cmd.Process.Pid, 5*time.Second); err != nil {
					t.Fatal(err)
				}
				reply(c, "go\n") // read once it is resumed
				p := &faultSharedPause{faultPause: faultPause{proc: c.id, token: ev.op.Token, stopped: faultNow()},
					role: r, slot: ev.op.Slot, keys: plan.keys(r, ev.op)}
				pauses, stopped[c.id] = append(pauses, p), p
				byRole[r]++
			default:
				op := ev.op
				hist.add(op)
				switch {
				case (op.Kind == faultLock || op.Kind == faultRLock) && op.Outcome == faultOK:
					acquisitions++
					sinceResume++
				case op.Kind == faultWrite && op.Outcome == faultOK:
					maxAccepted[op.Key] = max(maxAccepted[op.Key], op.Token)
				case op.Kind == faultUnlock || op.Kind == faultRUnlock:
					for _, p := range pauses {
						if p.proc == op.Proc && p.resumed != 0 && op.Start > p.resumed {
							p.done = true
						}
					}
				}
			}
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("run not done within %v: %d of %d pauses made", plan.limit, len(pauses), want)
		}
		for proc, p := range stopped {
			held := time.Duration(faultNow() - p.stopped)
			p.overtaken = true
			for _, k := range p.keys {
				p.overtaken = p.overtaken && maxAccepted[k] > p.token
			}
			// Until writers with higher tokens overtook it (the point of
			// the run), which a loaded machine can take long to do.
			if held < plan.pauseFor || !p.overtaken && held < plan.pauseFor+30*time.Second {
				continue
			}
			c := child[proc]
			if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatalf("SIGCONT worker %d: %v", proc, err)
			}
			p.resumed = faultNow()
			delete(stopped, proc)
			sinceResume = 0
			t.Logf("%s %d (token %d, slot %d) was stopped for %v; overtaken on %v: %v", p.role, proc, p.token, p.slot,
				time.Duration(p.resumed-p.stopped).Round(time.Millisecond), p.keys, p.overtaken)
		}
		if !finishing && len(pauses) == want && len(stopped) == 0 {
			finishing = true
			for _, p := range pauses {
				finishing = finishing && p.done
			}
		}
	}
	out := faultSharedRun{ops: hist.snapshot()}
	for _, p := range pauses {
		out.pauses = append(out.pauses, *p)
	}
	return out
}

// faultCheckLate checks the point of the scenarios (faultLate) and fails
// t on what it finds; it returns the number of late operations by role.
func faultCheckLate(t *testing.T, run faultSharedRun) map[string]int {
	t.Helper()
	late, notes, problems := faultLate(run)
	for _, n := range notes {
		t.Log(n)
	}
	for _, p := range problems {
		t.Error(p)
	}
	return late
}

// faultLate checks that after each pause that writers with higher tokens
// overtook, the paused worker went on with its section, and every write
// (writer, permit) or fenced read (reader) it made with its token was
// refused as stale. It returns the number of such late operations of each
// role, what it saw, and its findings: a late operation not refused, an
// overtaken pause with no late operation, a role whose pauses none was
// overtaken.
func faultLate(run faultSharedRun) (late map[string]int, notes, problems []string) {
	late = map[string]int{}
	demonstrated := map[string]int{}
	for _, p := range run.pauses {
		if !p.overtaken {
			notes = append(notes, fmt.Sprintf("%s %d's pause was never overtaken on %v", p.role, p.proc, p.keys))
			continue
		}
		kind := faultWrite
		if p.role == faultReader {
			kind = faultRead
		}
		n, refused := 0, 0
		for _, op := range run.ops {
			// Every operation of the paused section after the gate came
			// after SIGCONT: the process could not run before.
			if op.Proc != p.proc || op.Kind != kind || op.Token != p.token || op.Start < p.stopped {
				continue
			}
			n++
			if op.Outcome == faultStale {
				refused++
			} else {
				problems = append(problems, fmt.Sprintf("%s %d's late %s of %q with token %d after its pause: %s (%s), want refused as stale",
					p.role, p.proc, kind, op.Key, op.Token, op.Outcome, op.Err))
			}
		}
		if n == 0 {
			problems = append(problems, fmt.Sprintf("%s %d made no %s after its pause", p.role, p.proc, kind))
		}
		notes = append(notes, fmt.Sprintf("%s %d: %d late %ss with token %d after SIGCONT, %d refused as stale", p.role, p.proc, n, kind, p.token, refused))
		late[p.role] += n
		demonstrated[p.role]++
	}
	for _, p := range run.pauses {
		if demonstrated[p.role] == 0 {
			problems = append(problems, fmt.Sprintf("no %s's pause was overtaken by a writer (%d pauses): the scenario showed nothing", p.role, len(run.pauses)))
			demonstrated[p.role] = -1 // said once
		}
	}
	return late, notes, problems
}

// faultCleanShared deletes, when the test ends, the keys of c's name as a
// read-write lock and as a semaphore, and c's keys in the Redis store (the
// holds of owners expire on their own).
func faultCleanShared(t *testing.T, c faultHolderConfig) {
	t.Helper()
	faultCleanRedis(t, c)
	t.Cleanup(func() {
		rdb := redis.NewClient(&redis.Options{Addr: c.RedisAddr, DisableIdentity: true})
		defer rdb.Close()
		var keys []string
		for _, kind := range []byte{'w', 's'} {
			k := scripts.SharedKeys("redfence", c.Name, kind, "")
			keys = append(keys, k.Base, k.Index, k.Base+":e", k.Queue, k.Counter)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := rdb.Del(ctx, keys...).Err(); err != nil {
			t.Logf("cleanup of %v: %v", keys, err)
		}
	})
}
