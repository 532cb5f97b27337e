package storagetest

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage"
)

// testBroken breaks the backend while writers have 64 KiB Puts in flight.
// Calls after the break must fail, and what is left must be one whole
// write: the value belongs to the recorded token, the highest token is one
// some writer sent, and no acknowledged write was lost.
func testBroken(t *testing.T, f Fault) {
	const (
		key     = "broken"
		size    = 64 << 10
		writers = 4
		cap     = 5000 // per writer, in case Break fails to break anything
	)
	s := f.Store
	mustPut(t, s, key, valueFor(1, "broken", size), 1)

	var (
		next      atomic.Uint64
		mu        sync.Mutex
		acked     fence.Token
		attempted = map[fence.Token]bool{1: true}
		accepted  atomic.Int64
		failed    atomic.Int64
		ready     = make(chan struct{})
		readyOnce sync.Once
		wg        sync.WaitGroup
	)
	next.Store(1)
	for range writers {
		wg.Go(func() {
			for range cap {
				tok := fence.Token(next.Add(1))
				mu.Lock()
				attempted[tok] = true
				mu.Unlock()
				err := s.Put(t.Context(), key, valueFor(tok, "broken", size), tok)
				switch {
				case err == nil:
					mu.Lock()
					acked = max(acked, tok)
					mu.Unlock()
					if accepted.Add(1) >= 20 {
						readyOnce.Do(func() { close(ready) })
					}
				case errors.Is(err, fence.ErrStale):
				default:
					failed.Add(1)
					return
				}
			}
		})
	}
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("writers did not get 20 writes accepted within 30s")
	}
	f.Break()
	wg.Wait()

	if failed.Load() == 0 {
		t.Errorf("no in-flight writer saw an error after Break")
	}
	if err := s.Put(t.Context(), key, []byte("after"), fence.Token(next.Add(1))); err == nil || errors.Is(err, fence.ErrStale) {
		t.Errorf("Put after Break: %v; want a backend error", err)
	}
	if _, err := s.Get(t.Context(), key); err == nil || errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Get after Break: %v; want a backend error", err)
	}

	s2 := f.Reopen(t)
	// A write whose caller saw the break may still be running on the
	// server, and commit after it (PostgreSQL finishes a statement whose
	// client has gone). Read the value between two equal Highest readings,
	// so that it and Highest describe the same state.
	var (
		rec  storage.Record
		h    fence.Token
		err  error
		prev = fence.Token(1<<63 - 1)
	)
	for range 50 {
		if h, err = s2.Highest(t.Context(), key); err != nil {
			t.Fatalf("Highest after Reopen: %v", err)
		}
		if h == prev {
			break
		}
		if rec, err = s2.Get(t.Context(), key); err != nil {
			t.Fatalf("Get after Reopen: %v", err)
		}
		prev = h
		time.Sleep(100 * time.Millisecond)
	}
	tok, _, intact := parseValue(rec.Value)
	if !intact || tok != rec.Token || len(rec.Value) != size {
		t.Fatalf("after the break the value is not one whole write: token %d, %d bytes, intact %v", rec.Token, len(rec.Value), intact)
	}
	if h != rec.Token {
		t.Errorf("Highest = %d but the value was written with token %d", h, rec.Token)
	}
	if h < acked {
		t.Errorf("Highest = %d but token %d was acknowledged: an acknowledged write was lost", h, acked)
	}
	if !attempted[h] {
		t.Errorf("Highest = %d, a token no writer sent", h)
	}
	t.Logf("broken mid-call: %d writes accepted, %d writers saw the break; left token %d (highest acknowledged %d)",
		accepted.Load(), failed.Load(), h, acked)
}

// isNetTimeout reports whether err is a network timeout, which is how some
// clients report a context deadline that expired while they were reading.
func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
