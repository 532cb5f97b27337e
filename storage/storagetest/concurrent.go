package storagetest

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage"
)

// Stats are the figures of one [Concurrent] run.
type Stats struct {
	Writers  int           // concurrent writers, one per store given
	Accepted int           // Puts the store accepted
	Refused  int           // Puts refused as stale
	Reads    int           // Gets made by the concurrent readers
	Highest  fence.Token   // the final highest token
	Duration time.Duration // wall time of the writes
}

// testConcurrent runs [Concurrent] with every writer sharing the one store.
func testConcurrent(t *testing.T, s storage.Store, c config) {
	stores := make([]storage.Store, c.writers)
	for i := range stores {
		stores[i] = s
	}
	st := Concurrent(t, stores, "concurrent", c.writes)
	t.Logf("%d writers x %d puts: %d accepted, %d refused as stale, %d concurrent reads, highest %d, %v",
		st.Writers, c.writes, st.Accepted, st.Refused, st.Reads, st.Highest, st.Duration)
}

// op is one call as a concurrent client saw it: when it started and ended
// (monotonic clock), the token it carried or observed, and its outcome.
type op struct {
	start, end time.Time
	token      fence.Token
	accepted   bool
	highest    fence.Token // for a refused write: the StaleError's Highest
}

// Concurrent runs one writer goroutine per store in stores, each making
// writes Puts on key, while two readers Get the key through stores[0].
// Pass the same store several times to share one client, or stores with
// their own connections to contend across connections.
//
// Tokens are interleaved: round j hands the writers the tokens
// j*len(stores)+1 .. (j+1)*len(stores) in a random order, so writers
// overtake each other and many writes arrive stale. Concurrent then checks
// the outcome against the fencing rule as a linearizability oracle:
//
//   - no accepted write carries a token below one already accepted by a
//     write that finished before it started (no stale write accepted);
//   - every refusal names, as its highest, a token that was accepted and
//     whose write started before the refusal returned (no false refusal);
//   - no reader sees a token below one accepted before its read started,
//     nor a value that is not exactly what the write with its token wrote;
//   - the highest token is accepted, and the final record is its value.
//
// It fails t on any violation or unexpected error and returns the figures.
func Concurrent(t *testing.T, stores []storage.Store, key string, writes int) Stats {
	t.Helper()
	n := len(stores)
	if n == 0 || writes <= 0 {
		t.Fatalf("storagetest.Concurrent: need at least one store and one write, got %d stores, %d writes", n, writes)
	}
	perms := make([][]int, writes)
	for j := range perms {
		perms[j] = rand.Perm(n)
	}
	writeOps := make([][]op, n)
	readOps := make([][]op, 2)
	done := make(chan struct{})
	var readers, writers sync.WaitGroup
	for r := range readOps {
		readers.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				o, ok := readOnce(t, stores[0], key)
				if ok {
					readOps[r] = append(readOps[r], o)
				}
			}
		})
	}
	begin := time.Now()
	for w := range n {
		writers.Go(func() {
			for j := range writes {
				tok := fence.Token(j*n + perms[j][w] + 1)
				o := op{token: tok, start: time.Now()}
				err := stores[w].Put(t.Context(), key, valueFor(tok, "concurrent", 64), tok)
				o.end = time.Now()
				var se *fence.StaleError
				switch {
				case err == nil:
					o.accepted = true
				case errors.As(err, &se) && errors.Is(err, fence.ErrStale):
					if se.Token != tok {
						t.Errorf("refusal of token %d names token %d", tok, se.Token)
					}
					o.highest = se.Highest
				default:
					t.Errorf("writer %d, token %d: %v", w, tok, err)
					return
				}
				writeOps[w] = append(writeOps[w], o)
			}
		})
	}
	writers.Wait()
	st := Stats{Writers: n, Duration: time.Since(begin)}
	close(done)
	readers.Wait()

	var all, reads []op
	for _, ops := range writeOps {
		all = append(all, ops...)
	}
	for _, ops := range readOps {
		reads = append(reads, ops...)
	}
	st.Reads = len(reads)
	for _, o := range all {
		if o.accepted {
			st.Accepted++
		} else {
			st.Refused++
		}
	}
	if st.Accepted+st.Refused != n*writes {
		t.Fatalf("only %d of %d writes completed", st.Accepted+st.Refused, n*writes)
	}
	checkHistory(t, all, reads)

	top := fence.Token(n * writes)
	expect(t, stores[0], key, valueFor(top, "concurrent", 64), top, top)
	st.Highest = top
	return st
}

// readOnce reads key's record and highest token and checks the value is
// whole. It reports false when the key has no value yet.
func readOnce(t *testing.T, s storage.Store, key string) (op, bool) {
	o := op{start: time.Now()}
	rec, err := s.Get(t.Context(), key)
	o.end = time.Now()
	if errors.Is(err, storage.ErrNotFound) {
		return o, false
	}
	if err != nil {
		t.Errorf("concurrent Get: %v", err)
		return o, false
	}
	tok, tag, intact := parseValue(rec.Value)
	if !intact || tag != "concurrent" || tok != rec.Token {
		t.Errorf("concurrent Get saw token %d with a value that is not that write's: %q", rec.Token, clip(rec.Value))
	}
	o.token = rec.Token
	return o, true
}

// checkHistory checks writes and reads against the fencing rule in real
// time: whatever order the store serialized them in, it must be consistent
// with each call's start and end.
func checkHistory(t *testing.T, writes, reads []op) {
	t.Helper()
	acc := newAcceptedIndex(writes)
	for _, o := range writes {
		before := acc.maxEndedBefore(o.start)
		if o.accepted && o.token < before {
			t.Errorf("stale write accepted: token %d started after token %d was accepted", o.token, before)
		}
		if o.accepted {
			continue
		}
		h, ok := acc.byToken[o.highest]
		switch {
		case o.highest <= o.token:
			t.Errorf("token %d refused as stale against highest %d", o.token, o.highest)
		case !ok:
			t.Errorf("token %d refused against highest %d, which was never accepted", o.token, o.highest)
		case !h.start.Before(o.end):
			t.Errorf("token %d refused against token %d, whose write started after the refusal returned", o.token, o.highest)
		}
	}
	for _, r := range reads {
		if before := acc.maxEndedBefore(r.start); r.token < before {
			t.Errorf("reader saw token %d after token %d had been accepted", r.token, before)
		}
		w, ok := acc.byToken[r.token]
		if !ok {
			t.Errorf("reader saw token %d, which was never accepted", r.token)
		} else if !w.start.Before(r.end) {
			t.Errorf("reader saw token %d before its write started", r.token)
		}
	}
}
