package s3store_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage/s3store"
)

// rounds collects how many rounds (HEAD and conditional PUT) each write
// made.
type rounds struct {
	mu sync.Mutex
	n  map[int]int
}

func (r *rounds) add(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[int]int{}
	}
	r.n[n]++
}

func (r *rounds) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(r.n)) {
		fmt.Fprintf(&b, " %d:%d", k, r.n[k])
	}
	return "rounds:writes" + b.String()
}

// The figures of the closing note: requests per uncontended write, writes
// per second from 8 writers on 8 keys and on 1 key, and the rounds each
// write made under contention. Only the request count is asserted; the
// rest is logged (go test -run TestMeasure -v).
func TestMeasure(t *testing.T) {
	const writers, writes = 8, 50
	var r rounds
	s, c, _, _ := counted(t, s3store.WithAttemptsHook(r.add))
	ctx := t.Context()

	before := c.total.Load()
	for i := range writes {
		require.NoError(t, s.Put(ctx, "alone", []byte("v"), fence.Token(i+1)))
	}
	perWrite := float64(c.total.Load()-before) / writes
	require.Equal(t, 2.0, perWrite, "an uncontended write is a HEAD and a PUT")
	t.Logf("uncontended: %.2f requests per write (%d HEAD, %d PUT in all)", perWrite, c.count("HEAD"), c.count("PUT"))

	run := func(name string, key func(w int) string) {
		r = rounds{}
		before := c.total.Load()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var errs []error
		begin := time.Now()
		for w := range writers {
			wg.Go(func() {
				for range writes {
					// One token for all: every write must land, so each
					// conflict costs a round, the worst case for retries.
					if err := s.Put(ctx, key(w), []byte(fmt.Sprintf("writer %d", w)), 1000); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		took := time.Since(begin)
		n := writers * writes
		t.Logf("%s: %d writers x %d puts in %v: %.0f writes/s, %.2f requests per write, %d failed; %s",
			name, writers, writes, took.Round(time.Millisecond), float64(n-len(errs))/took.Seconds(),
			float64(c.total.Load()-before)/float64(n), len(errs), &r)
		for _, err := range errs[:min(len(errs), 3)] {
			t.Errorf("%s: %v", name, err)
		}
	}
	run("8 keys", func(w int) string { return fmt.Sprintf("key-%d", w) })
	run("1 key", func(int) string { return "shared" })
}
