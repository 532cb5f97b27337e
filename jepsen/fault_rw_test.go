//go:build unix

package jepsen_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// Scenario rw-pause: writers and readers of one fenced read-write lock
// (reentrant.RWMutex), each a process of its own, against the real Redis
// and a fenced store. A writer is stopped with SIGSTOP inside its section,
// after its first writes, past its lease, while the readers and the other
// writers go on; it is resumed with SIGCONT once another writer has written
// every key with a higher token, and its late writes must be refused
// (fence.ErrStale). A reader is stopped after its first fenced reads
// (storage.GetAt at its epoch) past its lease, while a newer writer
// writes every key; resumed, its late reads must be refused too. Every
// late write and read is counted. The oracle checks the writes as
// TestFaultClientPause's does, the reads (none returned a record older
// than a write accepted above its epoch before it began; every refusal
// explained by such a write) and the tokens (a write lease's above every
// token granted before it, a read lease's the epoch of the writes before
// it); a sampler checks, on the server's clock, that a writer never held
// the lock with another writer or a reader.
func TestFaultRWPause(t *testing.T) {
	for _, kind := range []string{"postgres", "redis"} {
		name := map[string]string{"postgres": "sqlstore-postgres", "redis": "redisstore"}[kind]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runFaultRW(t, "rw-pause/"+name, kind)
		})
	}
}

// faultRWSize sizes an rw-pause run.
type faultRWSize struct {
	writers, readers int
	steps            int
	gap, ttl         time.Duration
	writerPauses     int
	readerPauses     int
	pauseFor         time.Duration
	limit            time.Duration
}

func faultRWSizeOf() faultRWSize {
	s := faultRWSize{writers: 2, readers: 2, steps: 3, gap: 30 * time.Millisecond, ttl: time.Second,
		writerPauses: 1, readerPauses: 1, pauseFor: 3 * time.Second, limit: 3 * time.Minute}
	if faultLong() {
		s.writers, s.readers, s.writerPauses, s.readerPauses, s.limit = 3, 3, 4, 4, 10*time.Minute
	}
	return s
}

func runFaultRW(t *testing.T, scenario, kind string) {
	size := faultRWSizeOf()
	base := faultHolderConfig{
		RedisAddr: testenv.RedisAddr(t),
		Store:     kind,
		Prefix:    "redfence:jepsen:" + testenv.Unique(t),
		Name:      testenv.Unique(t),
		Keys:      []string{"a", "b"},
		Rounds:    1000, // a cap: the run ends the workers
		Steps:     size.steps,
		GapMS:     int(size.gap / time.Millisecond),
		TTLMS:     int(size.ttl / time.Millisecond),
	}
	faultCleanShared(t, base)
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
	for i := range size.writers + size.readers {
		c := faultSharedConfig{faultHolderConfig: base, Role: faultWriter}
		c.Proc = i
		if i >= size.writers {
			c.Role = faultReader
		}
		cfgs = append(cfgs, c)
	}
	sample, _ := faultSampleRW(t, base)
	run := runFaultShared(t, cfgs, faultSharedPlan{
		pauses:     map[string]int{faultWriter: size.writerPauses, faultReader: size.readerPauses},
		concurrent: 1,
		pauseFor:   size.pauseFor,
		limit:      size.limit,
		keys:       func(string, faultOp) []string { return base.Keys },
	})
	samples := sample()

	late := faultCheckLate(t, run)
	r := faultCheck(scenario, run.ops, faultFinal(t, store, base.Keys))
	r.Anomalies = append(r.Anomalies, faultCheckReads(run.ops)...)
	r.Anomalies = append(r.Anomalies, faultCheckEpochs(run.ops)...)
	r.Anomalies = append(r.Anomalies, samples.anomalies...)
	faultRecord(t, r)

	reads := map[string]int{}
	rlocks := 0
	for _, op := range run.ops {
		switch op.Kind {
		case faultRead:
			reads[op.Outcome]++
		case faultRLock:
			if op.Outcome == faultOK {
				rlocks++
			}
		}
	}
	t.Logf("%s: %d write leases, %d read leases; reads: %v; late writes refused: %d, late reads refused: %d; %d samples of the lock's state, %d with a writer, %d with readers (at most %d)",
		scenario, r.Acquisitions, rlocks, reads, late[faultWriter], late[faultReader], samples.n, samples.withWriter, samples.withReaders, samples.maxReaders)
	if rlocks == 0 || reads[faultOK] == 0 {
		t.Errorf("%s: no read lease, or no record read: the readers checked nothing", scenario)
	}
	if samples.n == 0 || samples.withWriter == 0 || samples.withReaders == 0 {
		t.Errorf("%s: the sampler saw no writer or no reader hold the lock in %d samples", scenario, samples.n)
	}
}

// faultCheckReads checks the fenced reads against the writes to the same
// key: a read at epoch e that returned a record (or found none) must not
// have begun after a write with a token above e was accepted (GetAt would
// have seen that write's record, or its token as the key's highest); a
// returned record was written at or below e; a read refused as stale must
// be explained by a write above e, accepted or unknown, that began before
// the read returned.
func faultCheckReads(ops []faultOp) []string {
	writes := map[string][]faultOp{}
	for _, op := range ops {
		if op.Kind == faultWrite {
			writes[op.Key] = append(writes[op.Key], op)
		}
	}
	var out []string
	for _, rd := range ops {
		if rd.Kind != faultRead {
			continue
		}
		switch rd.Outcome {
		case faultOK, faultAbsent:
			if rd.Outcome == faultOK && rd.Read > rd.Token {
				out = append(out, fmt.Sprintf("key %q: read at epoch %d returned a record of token %d", rd.Key, rd.Token, rd.Read))
			}
			for _, w := range writes[rd.Key] {
				if w.Outcome == faultOK && w.Token > rd.Token && w.End < rd.Start {
					out = append(out, fmt.Sprintf("key %q: read of proc %d at epoch %d returned %s (token %d), after a write of token %d was accepted",
						rd.Key, rd.Proc, rd.Token, rd.Outcome, rd.Read, w.Token))
					break
				}
			}
		case faultStale:
			explained := false
			for _, w := range writes[rd.Key] {
				if (w.Outcome == faultOK || w.Outcome == faultUnknown) && w.Token > rd.Token && w.Start < rd.End {
					explained = true
					break
				}
			}
			if !explained {
				out = append(out, fmt.Sprintf("key %q: read at epoch %d refused with no write above it before it", rd.Key, rd.Token))
			}
		}
	}
	return out
}

// faultCheckEpochs checks the tokens of the leases granted, in real time:
// a write lease's token is above that of every lease (write or read)
// granted before it began; a read lease's token (its epoch) is at least
// the token of every write lease granted before it began.
func faultCheckEpochs(ops []faultOp) []string {
	var out []string
	for _, a := range ops {
		if (a.Kind != faultLock && a.Kind != faultRLock) || a.Outcome != faultOK {
			continue
		}
		for _, b := range ops {
			if (b.Kind != faultLock && b.Kind != faultRLock) || b.Outcome != faultOK || b.End >= a.Start {
				continue // b was not granted before a began
			}
			switch {
			case a.Kind == faultLock && a.Token <= b.Token:
				out = append(out, fmt.Sprintf("write lease of proc %d has token %d, not above the %s lease of token %d granted before it", a.Proc, a.Token, b.Kind, b.Token))
			case a.Kind == faultRLock && b.Kind == faultLock && a.Token < b.Token:
				out = append(out, fmt.Sprintf("read lease of proc %d has epoch %d, below the write lease of token %d granted before it", a.Proc, a.Token, b.Token))
			}
		}
	}
	return out
}

// faultRWSamples is what the sampler of a read-write lock's state saw.
type faultRWSamples struct {
	n, withWriter, withReaders, maxReaders int
	anomalies                              []string
}

// faultSampleRW reads the state of c's read-write lock with
// RWMutex.Inspect (one script: the server's clock) every few milliseconds
// until the returned function is called, which returns what it saw: a
// sample with two writers, or a writer and a reader, or a holder without
// an expiry, is an anomaly.
func faultSampleRW(t *testing.T, c faultHolderConfig) (stop func() faultRWSamples, taken *atomic.Int64) {
	rdb := redis.NewClient(&redis.Options{Addr: c.RedisAddr, DisableIdentity: true})
	lc, err := reentrant.New(rdb)
	if err != nil {
		_ = rdb.Close()
		t.Fatal(err)
	}
	rw := lc.RWMutex(c.Name)
	ctx, cancel := context.WithCancel(context.Background())
	taken = new(atomic.Int64)
	var s faultRWSamples
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			st, err := rw.Inspect(ctx)
			if err == nil {
				s.n++
				writers, readers := 0, 0
				for _, h := range st.Holders {
					switch h.Meta {
					case "write":
						writers++
					case "read":
						readers++
					}
					if h.TTL < 0 && len(s.anomalies) < 10 { // 0: less than a millisecond left
						s.anomalies = append(s.anomalies, fmt.Sprintf("sample: %s holder %s with TTL %v", h.Meta, h.Owner, h.TTL))
					}
				}
				if writers > 0 {
					s.withWriter++
				}
				if readers > 0 {
					s.withReaders++
				}
				s.maxReaders = max(s.maxReaders, readers)
				if (writers > 1 || writers == 1 && readers > 0) && len(s.anomalies) < 10 {
					s.anomalies = append(s.anomalies, fmt.Sprintf("sample: %d writers and %d readers hold the lock at once: %+v", writers, readers, st.Holders))
				}
			}
			taken.Add(1)
			faultSleep(ctx, 5*time.Millisecond)
		}
	})
	stop = sync.OnceValue(func() faultRWSamples {
		cancel()
		wg.Wait()
		_ = lc.Close()
		_ = rdb.Close()
		return s
	})
	t.Cleanup(func() { stop() })
	return stop, taken
}
