//go:build unix

package jepsen_test

import (
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/storage"
)

// Scenario 1: a lock holder is paused past its lease. Holders are separate
// processes (this test binary, re-executed); the test freezes one with
// SIGSTOP inside its critical section, right after its first write, until
// another holder has taken the lock and written every key, then lets it go
// on with SIGCONT. The frozen holder's renewal was frozen with it, so its
// lease ran out in Redis, but it still believes it holds the lock: its
// remaining writes must be refused with fence.ErrStale.
func TestFaultClientPause(t *testing.T) {
	t.Run("redisstore", func(t *testing.T) {
		run := runFaultPause(t, "redis")
		faultCheckPauses(t, run)
		faultRecord(t, faultCheck("client-pause/redisstore", run.ops, run.final))
	})
	t.Run("sqlstore-postgres", func(t *testing.T) {
		run := runFaultPause(t, "postgres")
		faultCheckPauses(t, run)
		faultRecord(t, faultCheck("client-pause/sqlstore-postgres", run.ops, run.final))
	})
}

// faultPauseConfig sizes a client-pause run.
type faultPauseConfig struct {
	holders, rounds, steps int
	gap, ttl               time.Duration
	pauses                 int
	pauseFor               time.Duration
	limit                  time.Duration // bound of the whole run
}

func faultPauseSize() faultPauseConfig {
	if faultLong() {
		return faultPauseConfig{holders: 6, rounds: 40, steps: 4, gap: 20 * time.Millisecond, ttl: 300 * time.Millisecond,
			pauses: 5, pauseFor: 2 * time.Second, limit: 5 * time.Minute}
	}
	return faultPauseConfig{holders: 3, rounds: 4, steps: 3, gap: 20 * time.Millisecond, ttl: 300 * time.Millisecond,
		pauses: 1, pauseFor: time.Second, limit: 2 * time.Minute}
}

// faultPause is one SIGSTOP/SIGCONT of a holder process.
type faultPause struct {
	proc             int
	token            uint64
	stopped, resumed int64 // faultNow
	// overtaken: before SIGCONT another holder had written every key with
	// a higher token, so every write the paused holder makes is stale.
	overtaken bool
}

type faultPauseRun struct {
	ops    []faultOp
	final  map[string]*storage.Record
	pauses []faultPause
}

// runFaultPause runs holder processes against the real Redis (the lock)
// and a store of kind ("redis", "postgres", "broken"), pausing them as
// faultPauseSize says, and returns what happened.
func runFaultPause(t *testing.T, kind string) faultPauseRun {
	size := faultPauseSize()
	base := faultHolderConfig{
		RedisAddr: testenv.RedisAddr(t),
		Store:     kind,
		Prefix:    "redfence:jepsen:" + testenv.Unique(t),
		Name:      testenv.Unique(t),
		Keys:      []string{"a", "b"},
		Rounds:    size.rounds,
		Steps:     size.steps,
		GapMS:     int(size.gap / time.Millisecond),
		TTLMS:     int(size.ttl / time.Millisecond),
	}
	faultCleanRedis(t, base)
	if kind == "postgres" {
		base.PGURL = testenv.PostgresURL(t)
		base.Table = faultPGTable(t, base.PGURL)
	}
	store, closeStore, err := faultOpenStore(base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeStore)

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
				t.Errorf("holder %d (pid %d) not reaped within 10s of SIGKILL", c.id, c.cmd.Process.Pid)
			}
		}
	})
	for i := range size.holders {
		cfg := base
		cfg.Proc = i
		children = append(children, faultStartChild(t, cfg, events, quit))
	}

	hist := &faultHistory{}
	maxAccepted := map[string]uint64{}
	overtaken := func(tok uint64) bool {
		for _, k := range base.Keys {
			if maxAccepted[k] <= tok {
				return false
			}
		}
		return true
	}
	var (
		pauses       []faultPause
		cur          *faultPause // the pause in progress
		curChild     *faultChild
		acquisitions int
		sinceResume  int // acquisitions since the last pause ended
		live         = len(children)
	)
	deadline := time.NewTimer(size.limit)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	release := func(c *faultChild) {
		if _, err := io.WriteString(c.stdin, "\n"); err != nil {
			t.Logf("holder %d: release: %v", c.id, err)
		}
	}
	for live > 0 {
		select {
		case ev := <-events:
			switch {
			case ev.exit:
				live--
				if ev.err != nil || !ev.child.done {
					t.Errorf("holder %d exited (%v) without finishing; its output:\n%s", ev.child.id, ev.err, ev.child.noise.String())
				}
			case ev.op.Kind == "done":
				ev.child.done = true
			case ev.op.Kind == "gate":
				others := 0
				for _, c := range children {
					if c != ev.child && !c.done {
						others++
					}
				}
				if cur != nil || len(pauses) >= size.pauses || acquisitions < 2 || sinceResume < 2 || others == 0 {
					release(ev.child)
					break
				}
				if err := ev.child.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatalf("SIGSTOP holder %d: %v", ev.child.id, err)
				}
				if err := testenv.WaitStopped(ev.child.cmd.Process.Pid, 5*time.Second); err != nil {
					t.Fatal(err)
				}
				// Queued while it is frozen: it goes on at SIGCONT.
				release(ev.child)
				cur = &faultPause{proc: ev.child.id, token: ev.op.Token, stopped: faultNow()}
				curChild = ev.child
			default:
				hist.add(ev.op)
				if ev.op.Kind == faultLock && ev.op.Outcome == faultOK {
					acquisitions++
					sinceResume++
				}
				if ev.op.Kind == faultWrite && ev.op.Outcome == faultOK {
					maxAccepted[ev.op.Key] = max(maxAccepted[ev.op.Key], ev.op.Token)
				}
			}
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("client-pause run not done within %v", size.limit)
		}
		if cur != nil {
			held := time.Duration(faultNow() - cur.stopped)
			cur.overtaken = overtaken(cur.token)
			// Until another holder overtook it (the point of the run),
			// which a loaded machine can take longer than 5 s to do.
			if held >= size.pauseFor && (cur.overtaken || held >= size.pauseFor+20*time.Second) {
				if err := curChild.cmd.Process.Signal(syscall.SIGCONT); err != nil {
					t.Fatalf("SIGCONT holder %d: %v", curChild.id, err)
				}
				cur.resumed = faultNow()
				t.Logf("holder %d (token %d) was stopped for %v; overtaken by a higher token on every key: %v",
					cur.proc, cur.token, time.Duration(cur.resumed-cur.stopped).Round(time.Millisecond), cur.overtaken)
				pauses = append(pauses, *cur)
				cur, curChild, sinceResume = nil, nil, 0
			}
		}
	}
	return faultPauseRun{ops: hist.snapshot(), final: faultFinal(t, store, base.Keys), pauses: pauses}
}

// faultCheckPauses checks the point of the scenario: after each pause that
// another holder overtook, the paused holder wrote again and every one of
// those writes was refused as stale.
func faultCheckPauses(t *testing.T, run faultPauseRun) {
	t.Helper()
	demonstrated := 0
	for _, p := range run.pauses {
		if !p.overtaken {
			t.Logf("holder %d's pause was never overtaken: no other holder wrote every key meanwhile", p.proc)
			continue
		}
		late := 0
		for _, op := range run.ops {
			// Every write of the paused section after the gate came after
			// SIGCONT: the process could not run before.
			if op.Proc != p.proc || op.Kind != faultWrite || op.Token != p.token || op.Start < p.stopped {
				continue
			}
			late++
			if op.Outcome != faultStale {
				t.Errorf("holder %d's late write %q with token %d after its pause: %s (%s), want refused as stale", p.proc, op.Value, op.Token, op.Outcome, op.Err)
			}
		}
		if late == 0 {
			t.Errorf("holder %d made no write after its pause", p.proc)
		}
		t.Logf("holder %d: %d late writes with token %d after SIGCONT", p.proc, late, p.token)
		demonstrated++
	}
	if demonstrated == 0 {
		t.Errorf("no pause was overtaken by another holder (%d pauses): the scenario showed nothing", len(run.pauses))
	}
}
