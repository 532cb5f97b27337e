//go:build unix

package jepsen_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/internal/tuning"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage/redisstore"
)

// electionConfig configures one candidate process.
type electionConfig struct {
	Proc       int    `json:"proc"`
	RedisAddr  string `json:"redis_addr"`
	Prefix     string `json:"prefix"` // of the lock and of the store's records
	Name       string `json:"name"`
	TTLMS      int    `json:"ttl_ms"`
	DurationMS int    `json:"duration_ms"`
}

// electionEvent is one line a candidate prints. At and Done are
// CLOCK_MONOTONIC (faultNow), the same clock in every process.
type electionEvent struct {
	Proc  int    `json:"proc"`
	Kind  string `json:"kind"` // start, write, resign, end, late, stale, done
	Token uint64 `json:"token"`
	At    int64  `json:"at"`   // start: when Campaign returned; write, late: taken before the term was checked
	Done  int64  `json:"done"` // write, late: when the store answered
	OK    bool   `json:"ok"`   // write, late: accepted; stale: Proclaim refused and Resign a no-op
	Stale bool   `json:"stale"`
	Cause string `json:"cause"` // end: "released" or "lost"
	Err   string `json:"err"`
}

const electionConfigVar = "REDFENCE_ELECTION_CONFIG"

// TestHelperCandidateProcess is not a test: TestElectionChurn re-executes
// the test binary with REDFENCE_FAULT_HELPER=candidate to run candidates
// as processes it can SIGSTOP. Each campaigns in a loop; while it leads it
// writes its token to a fenced store every 10 ms, checking the term before
// each write, and resigns after a second or two; after each term it
// writes once more with the old token (the paused leader's late write)
// and calls Proclaim and Resign on the old term.
func TestHelperCandidateProcess(t *testing.T) {
	if os.Getenv(faultHelperVar) != "candidate" {
		return
	}
	var c electionConfig
	if err := json.Unmarshal([]byte(os.Getenv(electionConfigVar)), &c); err != nil {
		t.Fatalf("%s: %v", electionConfigVar, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: c.RedisAddr, DisableIdentity: true})
	defer rdb.Close()
	ttl := time.Duration(c.TTLMS) * time.Millisecond
	locks, err := reentrant.New(rdb, reentrant.WithPrefix(c.Prefix), reentrant.WithTTL(ttl), tuning.MaxRetryDelay(ttl).(reentrant.ClientOption))
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	store, err := redisstore.New(rdb, redisstore.WithPrefix(c.Prefix+":store"))
	if err != nil {
		t.Fatal(err)
	}
	enc := json.NewEncoder(os.Stdout)
	emit := func(ev electionEvent) {
		ev.Proc = c.Proc
		if err := enc.Encode(ev); err != nil {
			os.Exit(3) // the test is gone
		}
	}
	bg := context.Background()
	end := time.Now().Add(time.Duration(c.DurationMS) * time.Millisecond)
	for time.Now().Before(end) {
		ctx, cancel := context.WithDeadline(bg, end)
		term, err := locks.Campaign(ctx, c.Name, fmt.Sprint("candidate-", c.Proc))
		cancel()
		if err != nil {
			continue
		}
		tok := term.Token()
		emit(electionEvent{Kind: "start", Token: uint64(tok), At: faultNow()})
		resignAt := time.Now().Add(time.Second + time.Duration(c.Proc)*200*time.Millisecond)
		for seq := 0; ; seq++ {
			at := faultNow() // before the check: the term was live at this instant
			if err := term.Err(); err != nil {
				cause := "lost"
				if errors.Is(err, reentrant.ErrReleased) {
					cause = "released"
				}
				emit(electionEvent{Kind: "end", Token: uint64(tok), At: faultNow(), Cause: cause, Err: err.Error()})
				break
			}
			err := store.Put(bg, "config", fmt.Appendf(nil, "%d:%d", c.Proc, seq), tok)
			emit(electionEvent{Kind: "write", Token: uint64(tok), At: at, Done: faultNow(), OK: err == nil, Stale: errors.Is(err, fence.ErrStale), Err: errString(err)})
			if time.Now().After(resignAt) {
				emit(electionEvent{Kind: "resign", Token: uint64(tok), At: faultNow()})
				if err := term.Resign(bg); err != nil {
					emit(electionEvent{Kind: "resign", Token: uint64(tok), Err: err.Error()})
				}
				resignAt = time.Now().Add(time.Hour)
			}
			time.Sleep(10 * time.Millisecond)
		}
		at := faultNow()
		err = store.Put(bg, "config", fmt.Appendf(nil, "%d:late", c.Proc), tok)
		emit(electionEvent{Kind: "late", Token: uint64(tok), At: at, Done: faultNow(), OK: err == nil, Stale: errors.Is(err, fence.ErrStale), Err: errString(err)})
		perr, rerr := term.Proclaim(bg, "stale"), term.Resign(bg)
		emit(electionEvent{Kind: "stale", Token: uint64(tok), At: faultNow(), OK: errors.Is(perr, reentrant.ErrNotHeld) && rerr == nil,
			Err: fmt.Sprint(perr, "; ", rerr)})
	}
	emit(electionEvent{Kind: "done", At: faultNow()})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Five candidate processes for 30 s; every few seconds the leader is
// SIGSTOPped for twice the TTL and resumed. Terms, as each holder saw
// them (from its start to its last check that found it live), never
// overlap in time and their tokens rise; every write a live term made was
// accepted; a resumed leader's late write is refused once a successor
// wrote; an old term's Proclaim is refused and its Resign a no-op (the
// script's own checks are TestProclaim's, in internal/scripts); and
// Leader, read every 20 ms, goes through terms in token order only.
func TestElectionChurn(t *testing.T) {
	addr := testenv.RedisAddr(t)
	const ttl = 500 * time.Millisecond
	run := 30 * time.Second
	if testing.Short() {
		run = 10 * time.Second
	}
	prefix := testenv.Unique(t)
	name := "leader"

	events := make(chan electionEvent, 1024)
	var procs []*exec.Cmd
	var readers sync.WaitGroup
	var exitMu sync.Mutex
	var exits []string // a candidate's failure, checked once every reader is done
	for i := range 5 {
		js, err := json.Marshal(electionConfig{Proc: i, RedisAddr: addr, Prefix: prefix, Name: name, TTLMS: int(ttl.Milliseconds()), DurationMS: int(run.Milliseconds())})
		require.NoError(t, err)
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCandidateProcess$", "-test.count=1", "-test.timeout=5m")
		cmd.Env = append(os.Environ(), faultHelperVar+"=candidate", electionConfigVar+"="+string(js))
		cmd.SysProcAttr = faultSysProcAttr()
		var noise faultLockedBuffer
		cmd.Stderr = &noise
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		procs = append(procs, cmd)
		readers.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var ev electionEvent
				if line := sc.Bytes(); len(line) > 0 && line[0] == '{' && json.Unmarshal(line, &ev) == nil {
					events <- ev
				} else {
					fmt.Fprintf(&noise, "%s\n", line)
				}
			}
			if err := cmd.Wait(); err != nil {
				exitMu.Lock()
				exits = append(exits, fmt.Sprintf("candidate %d: %v\n%s", i, err, noise.String()))
				exitMu.Unlock()
			}
		})
	}
	go func() { readers.Wait(); close(events) }()

	// The reader, in this process: raw Leader reads every 20 ms.
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks, err := reentrant.New(rdb, reentrant.WithPrefix(prefix))
	require.NoError(t, err)
	defer locks.Close()
	octx, stopObserving := context.WithCancel(t.Context())
	var observed []reentrant.Leader
	observing := make(chan struct{})
	go func() {
		defer close(observing)
		for octx.Err() == nil {
			if ld, err := locks.Leader(octx, name); err == nil {
				observed = append(observed, ld)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// The pauser: the current leader, SIGSTOPped for two TTLs.
	var all []electionEvent
	leading := map[int]uint64{} // proc -> token of its live term
	pauses := 0
	nextPause := time.Now().Add(2 * time.Second)
	for ev := range events {
		all = append(all, ev)
		switch ev.Kind {
		case "start":
			leading[ev.Proc] = ev.Token
		case "end":
			delete(leading, ev.Proc)
		}
		if time.Now().After(nextPause) && len(leading) == 1 {
			for p := range leading {
				// A candidate that has just exited is not paused.
				if procs[p].Process.Signal(syscall.SIGSTOP) == nil {
					time.Sleep(2 * ttl)
					_ = procs[p].Process.Signal(syscall.SIGCONT)
					pauses++
				}
			}
			nextPause = time.Now().Add(2500 * time.Millisecond)
		}
	}
	stopObserving()
	<-observing
	for _, e := range exits { // every reader is done: events is closed
		t.Error(e)
	}
	checkElectionHistory(t, all)
	require.GreaterOrEqual(t, pauses, 2, "leaders were paused")

	var last fence.Token
	leaders := 0
	for _, ld := range observed {
		assert.GreaterOrEqual(t, ld.Token, last, "a Leader read went back to an older term")
		if ld.Token != last {
			leaders++
		}
		last = ld.Token
	}
	assert.GreaterOrEqual(t, leaders, 3, "the reader saw the leaders change")
	t.Logf("SUMMARY election-churn %v: %d events, %d pauses, %d leader reads, %d leaders", run, len(all), pauses, len(observed), leaders)
}

// checkElectionHistory checks the candidates' events (see TestElectionChurn).
func checkElectionHistory(t *testing.T, all []electionEvent) {
	type term struct {
		proc        int
		token       uint64
		first, last int64
		cause       string
		resigned    bool
	}
	terms := map[uint64]*term{}
	var accepted []electionEvent // writes the store accepted, live or late
	var refused []electionEvent  // writes it refused as stale
	lateRefused := 0
	for _, ev := range all {
		tm := terms[ev.Token]
		if tm == nil && ev.Token != 0 {
			tm = &term{proc: ev.Proc, token: ev.Token, first: ev.At, last: ev.At}
			terms[ev.Token] = tm
		}
		switch ev.Kind {
		case "start":
			require.Equal(t, ev.Proc, tm.proc, "token %d issued to two candidates", ev.Token)
			tm.first = min(tm.first, ev.At)
		case "write":
			tm.last = max(tm.last, ev.At)
			if ev.OK {
				accepted = append(accepted, ev)
			} else {
				// Sent while live, it may land after a pause, behind a
				// successor's write: refused, as fencing is for.
				assert.True(t, ev.Stale, "candidate %d's write in term %d failed otherwise than stale: %s", ev.Proc, ev.Token, ev.Err)
				refused = append(refused, ev)
			}
		case "resign":
			tm.resigned = true
			assert.Empty(t, ev.Err, "Resign failed")
		case "end":
			tm.cause = ev.Cause
		case "late":
			if ev.OK {
				accepted = append(accepted, ev)
			} else {
				assert.True(t, ev.Stale, "late write failed otherwise than stale: %s", ev.Err)
				refused = append(refused, ev)
				if tm.cause == "lost" { // a paused leader's, not a resigned one's
					lateRefused++
				}
			}
		case "stale":
			assert.True(t, ev.OK, "an ended term's Proclaim must be refused and Resign do nothing: %s", ev.Err)
		}
	}
	// Terms as their holders saw them never overlap, and their tokens
	// rise in time.
	var ordered []*term
	for _, tm := range terms {
		ordered = append(ordered, tm)
	}
	slices.SortFunc(ordered, func(a, b *term) int { return int(a.first - b.first) })
	for i := 1; i < len(ordered); i++ {
		a, b := ordered[i-1], ordered[i]
		assert.Less(t, a.last, b.first, "term %d (candidate %d) still live when term %d (candidate %d) began", a.token, a.proc, b.token, b.proc)
		assert.Less(t, a.token, b.token, "tokens must rise from term to term")
	}
	for _, tm := range ordered {
		if tm.cause == "released" {
			assert.True(t, tm.resigned, "term %d ended released without its own Resign: another term's call touched it", tm.token)
		}
	}
	// No accepted write after a write with a higher token was.
	slices.SortFunc(accepted, func(a, b electionEvent) int { return int(a.Done - b.Done) })
	var highest uint64
	var highestAt int64
	for _, w := range accepted {
		if w.At > highestAt && w.Token < highest {
			t.Errorf("candidate %d's write with token %d accepted after token %d was", w.Proc, w.Token, highest)
		}
		if w.Token > highest {
			highest, highestAt = w.Token, w.Done
		}
	}
	// A refused write was refused for a higher token accepted before it.
	for _, r := range refused {
		ok := slices.ContainsFunc(accepted, func(w electionEvent) bool { return w.Token > r.Token && w.At < r.Done })
		assert.True(t, ok, "candidate %d's write with token %d refused with no higher token written", r.Proc, r.Token)
	}
	require.GreaterOrEqual(t, len(ordered), 4, "terms changed hands")
	assert.Positive(t, lateRefused, "a resumed (lost) leader's late write was refused")
}
