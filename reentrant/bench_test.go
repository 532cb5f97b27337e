package reentrant_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// BenchmarkBaselineSetNX is the floor: the two commands of the simplest
// Redis lock (SET NX PX, then DEL), no token, no reentry, no checks. Compare
// the lock's figures with it in the same run, as a ratio.
func BenchmarkBaselineSetNX(b *testing.B) {
	rdb := testenv.Redis(b)
	key := "rfbench:" + testenv.Unique(b)
	ctx := b.Context()
	for b.Loop() {
		if !rdb.SetNX(ctx, key, "x", time.Minute).Val() {
			b.Fatal("SET NX refused")
		}
		rdb.Del(ctx, key)
	}
}

// BenchmarkLockUnlock is a fresh acquisition and a full release: two
// script calls (docs/benchmarks.md, "Commands per call", lists the commands each runs).
func BenchmarkLockUnlock(b *testing.B) { benchLockUnlock(b) }

// BenchmarkLockUnlockStrictTokens is BenchmarkLockUnlock with
// WithStrictTokens: a counter per name instead of the slot's floor, and
// no expiry (under strictPrefix: one token mode per prefix).
func BenchmarkLockUnlockStrictTokens(b *testing.B) { benchLockUnlock(b, strictOpts...) }

func benchLockUnlock(b *testing.B, opts ...reentrant.ClientOption) {
	c, name, ctx := benchClient(b, opts...)
	for b.Loop() {
		l, err := c.Lock(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReenter is a reentry and its release under a held lock.
func BenchmarkReenter(b *testing.B) {
	c, name, ctx := benchClient(b)
	outer, err := c.Lock(ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		l, err := c.Lock(outer.Context(), name)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTryLockHeld is a refused attempt on a lock another owner holds.
func BenchmarkTryLockHeld(b *testing.B) {
	c, name, ctx := benchClient(b)
	if _, err := c.Lock(ctx, name); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := c.TryLock(ctx, name); err == nil {
			b.Fatal("acquired a held lock")
		}
	}
}

// BenchmarkRenew10k is one renewal of 10,000 held leases: the batch the
// renewer sends when all of them fall due in one tick, as one pipeline.
// ns/renewal is the whole cost (client and server) of keeping one lease
// alive once per renew interval.
func BenchmarkRenew10k(b *testing.B) {
	const n = 10_000
	// A long TTL keeps the background renewer out of the figures.
	c, err := reentrant.New(testenv.Redis(b), reentrant.WithPrefix(prefix), reentrant.WithTTL(10*time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	base, ctx := testenv.Unique(b), b.Context()
	for i := range n {
		if _, err := c.Lock(ctx, base+"-"+strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if got := reentrant.RenewAllNow(c); got != n {
			b.Fatalf("renewed %d leases, want %d", got, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/renewal")
}

// benchClient returns a client of the real Redis without renewal (no
// background traffic in the figures), a fresh lock name and a context.
func benchClient(b *testing.B, opts ...reentrant.ClientOption) (*reentrant.Client, string, context.Context) {
	b.Helper()
	c, err := reentrant.New(testenv.Redis(b), append([]reentrant.ClientOption{reentrant.WithPrefix(prefix), reentrant.WithoutRenewal()}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c, testenv.Unique(b), b.Context()
}
