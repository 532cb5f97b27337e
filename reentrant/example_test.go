package reentrant_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage/memory"
)

// The examples run on an embedded Redis (miniredis), so that they need
// nothing installed; any Redis, Sentinel or Cluster client works the same.
// Tokens on a fresh Redis start at 1. Example shows the set-up at length;
// the others start it with newLocks.

// newLocks starts an embedded Redis and a lock client on it, built with
// opts, as Example does; stop closes both.
func newLocks(opts ...reentrant.ClientOption) (locks *reentrant.Client, stop func()) {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	locks, err = reentrant.New(rdb, opts...)
	if err != nil {
		log.Fatal(err)
	}
	return locks, func() {
		_ = locks.Close()
		_ = rdb.Close()
		mr.Close()
	}
}

func Example() {
	mr, _ := miniredis.Run() // any Redis; an embedded one here
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	locks, err := reentrant.New(rdb) // 30 s lease, renewed every 10 s
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	store := memory.New() // or redisstore, sqlstore: any fenced store
	ctx := context.Background()

	lease, err := locks.Lock(ctx, "invoice-42") // ctx bounds the wait only
	if err != nil {
		log.Fatal(err)
	}
	// Pass the token with every write; work under lease.Context(), which is
	// cancelled if the lease is lost.
	err = store.Put(lease.Context(), "invoice-42", []byte("paid"), lease.Token())
	fmt.Println("write ->", err)

	// The same context reenters: same token, one level deeper.
	inner, err := locks.Lock(lease.Context(), "invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reentered: same token:", inner.Token() == lease.Token(), "depth", inner.Depth())
	_ = inner.Unlock(ctx)
	_ = lease.Unlock(ctx)

	// A later holder gets a higher token; the store now refuses the old one.
	next, err := locks.Lock(ctx, "invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	_ = store.Put(next.Context(), "invoice-42", []byte("refunded"), next.Token())
	err = store.Put(ctx, "invoice-42", []byte("late"), lease.Token())
	fmt.Println("later token is higher:", next.Token() > lease.Token(), "late write stale:", errors.Is(err, fence.ErrStale))
	_ = next.Unlock(ctx)
	// Output:
	// write -> <nil>
	// reentered: same token: true depth 2
	// later token is higher: true late write stale: true
}

func ExampleClient_Lock() {
	locks, stop := newLocks()
	defer stop()
	store := memory.New()
	ctx := context.Background()

	lease, err := locks.Lock(ctx, "invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	err = store.Put(lease.Context(), "invoice-42", []byte("paid"), lease.Token())
	fmt.Println("put ->", err)

	// A plain context is another owner, which waits as long as its context
	// allows. That context bounds the wait only, never the lease.
	wait, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	// It fails with ErrNotAcquired, or ErrOutcomeUnknown when the deadline
	// cut an attempt in flight (which is then undone): either way, with the
	// context's error.
	_, err = locks.Lock(wait, "invoice-42")
	fmt.Println("gave up:", errors.Is(err, reentrant.ErrNotAcquired) || errors.Is(err, reentrant.ErrOutcomeUnknown),
		errors.Is(err, context.DeadlineExceeded))

	if err := lease.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	next, err := locks.Lock(ctx, "invoice-42") // free again: a new ownership, a higher token
	if err != nil {
		log.Fatal(err)
	}
	defer next.Unlock(ctx)
	fmt.Println("next owner's token is higher:", next.Token() > lease.Token())
	// Output:
	// put -> <nil>
	// gave up: true true
	// next owner's token is higher: true
}

func ExampleClient_TryLock() {
	locks, stop := newLocks()
	defer stop()
	ctx := context.Background()

	held, err := locks.Lock(ctx, "job")
	if err != nil {
		log.Fatal(err)
	}
	// TryLock answers at once: another owner holds the lock.
	_, err = locks.TryLock(ctx, "job")
	if errors.Is(err, reentrant.ErrNotAcquired) {
		fmt.Println("busy, skipping this run")
	}

	_ = held.Unlock(ctx)
	lease, err := locks.TryLock(ctx, "job")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	fmt.Println("acquired, token above the last holder's:", lease.Token() > held.Token())
	// Output:
	// busy, skipping this run
	// acquired, token above the last holder's: true
}

func ExampleClient_Do() {
	locks, stop := newLocks()
	defer stop()
	store := memory.New()
	ctx := context.Background()

	// Do locks, runs the function and always unlocks. The function gets the
	// lease's context and the token to pass to every fenced write.
	var used fence.Token
	err := locks.Do(ctx, "nightly-report", func(ctx context.Context, token fence.Token) error {
		used = token
		return store.Put(ctx, "report/latest", []byte("42 invoices"), token)
	})
	if err != nil {
		log.Fatal(err)
	}
	rec, err := store.Get(ctx, "report/latest")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s, written with Do's token: %v\n", rec.Value, rec.Token == used)
	// Output:
	// 42 invoices, written with Do's token: true
}

// A lock call made with a lease's context reenters the lock: the same owner,
// the same token, one level deeper. A helper that takes the lock can so be
// called both on its own and from code that already holds it.
func ExampleClient_Lock_reentry() {
	locks, stop := newLocks()
	defer stop()
	ctx := context.Background()

	// charge takes the account's lock, whoever calls it, and returns the
	// token it wrote under.
	charge := func(ctx context.Context, cents int) (fence.Token, error) {
		lease, err := locks.Lock(ctx, "account-7")
		if err != nil {
			return fence.None, err
		}
		defer lease.Unlock(ctx)
		fmt.Println("charge", cents, "at depth", lease.Depth())
		return lease.Token(), nil
	}

	lease, err := locks.Lock(ctx, "account-7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("checkout at depth", lease.Depth())
	tok, err := charge(lease.Context(), 1250) // reenters
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same token:", tok == lease.Token())

	// A plain context is another owner: it cannot get in.
	_, err = locks.TryLock(ctx, "account-7")
	fmt.Println("another owner refused:", errors.Is(err, reentrant.ErrNotAcquired))

	_ = lease.Unlock(ctx) // the last level: the lock is free
	st, err := locks.Inspect(ctx, "account-7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", st.Held)
	// Output:
	// checkout at depth 1
	// charge 1250 at depth 2
	// same token: true
	// another owner refused: true
	// held: false
}

// Without renewal, the holder keeps its lease alive itself, between steps
// of its work, and stops when Extend says the lock is no longer its own.
func ExampleLease_Extend() {
	locks, stop := newLocks(reentrant.WithoutRenewal(), reentrant.WithTTL(10*time.Second))
	defer stop()
	ctx := context.Background()

	lease, err := locks.Lock(ctx, "import")
	if err != nil {
		log.Fatal(err)
	}
	for batch := 1; batch <= 3; batch++ {
		// ... import one batch, writing with lease.Token() ...
		if err := lease.Extend(ctx, 10*time.Second); err != nil {
			log.Fatal(err) // errors.Is(err, reentrant.ErrNotHeld): the lock is lost
		}
		fmt.Println("batch", batch, "imported")
	}
	left, err := lease.TTL(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("lease left:", left.Round(time.Second))

	_ = lease.Unlock(ctx)
	err = lease.Extend(ctx, 10*time.Second)
	fmt.Println("after unlock:", errors.Is(err, reentrant.ErrNotHeld))
	// Output:
	// batch 1 imported
	// batch 2 imported
	// batch 3 imported
	// lease left: 10s
	// after unlock: true
}

// Work under a lease stops when the lease ends. Done is closed, and Err says
// why, when the lock is found gone or cannot be renewed in time: the lock may
// be someone else's now, so the holder must stop writing.
func ExampleLease_Context() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locks, err := reentrant.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()

	// A short TTL: renewed every 100 ms, lost within 300 ms.
	lease, err := locks.Lock(ctx, "reindex", reentrant.WithTTL(300*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)

	// Simulate a loss: Redis's clock jumps past the lease, as if this process
	// had been paused for a minute. The next renewal finds the lock gone.
	mr.FastForward(time.Minute)

	step := time.NewTicker(10 * time.Millisecond)
	defer step.Stop()
	for {
		select {
		case <-lease.Context().Done():
			fmt.Println("stopped; lease lost:", errors.Is(lease.Err(), reentrant.ErrLost))
			return
		case <-step.C:
			// ... one step of work, its writes fenced with lease.Token() ...
		}
	}
	// Output:
	// stopped; lease lost: true
}

// Options given to one call override the client's for that call: how it
// waits, its lease, its metadata.
func ExampleWithRetry() {
	locks, stop := newLocks()
	defer stop()
	ctx := context.Background()

	held, err := locks.Lock(ctx, "export", reentrant.WithTTL(5*time.Second), reentrant.WithMetadata("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer held.Unlock(ctx)

	// Poll every 10 ms, three times at most, then give up.
	few := reentrant.LimitRetry(reentrant.LinearBackoff(10*time.Millisecond), 3)
	_, err = locks.Lock(ctx, "export", reentrant.WithRetry(few))
	fmt.Println("limited:", errors.Is(err, reentrant.ErrNotAcquired))

	// NoRetry gives up at once, like TryLock.
	_, err = locks.Lock(ctx, "export", reentrant.WithRetry(reentrant.NoRetry()))
	fmt.Println("no retry:", errors.Is(err, reentrant.ErrNotAcquired))
	// Output:
	// limited: true
	// no retry: true
}

// Inspect reads a lock's state without taking it: who holds it, with which
// token, and the metadata the holder left with WithMetadata.
func ExampleClient_Inspect() {
	locks, stop := newLocks()
	defer stop()
	ctx := context.Background()

	lease, err := locks.Lock(ctx, "invoice-42", reentrant.WithMetadata("worker-3 job 1842"))
	if err != nil {
		log.Fatal(err)
	}
	st, err := locks.Inspect(ctx, "invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("held: %v, depth %d, by %q, ours: %v, our token: %v\n",
		st.Held, st.Depth, st.Meta, st.Owner == string(lease.Owner()), st.Token == lease.Token())

	_ = lease.Unlock(ctx)
	st, err = locks.Inspect(ctx, "invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("held: %v, last token ours: %v\n", st.Held, st.LastToken == lease.Token())
	// Output:
	// held: true, depth 1, by "worker-3 job 1842", ours: true, our token: true
	// held: false, last token ours: true
}

// List walks the locks held under the client's prefix; a released lock is
// not listed. The order is SCAN's: sort what you print.
func ExampleClient_List() {
	locks, stop := newLocks()
	defer stop()
	ctx := context.Background()

	for _, name := range []string{"invoice-42", "invoice-43", "report"} {
		if _, err := locks.Lock(ctx, name, reentrant.WithMetadata("worker-3")); err != nil {
			log.Fatal(err)
		}
	}
	done, err := locks.Lock(ctx, "invoice-44")
	if err != nil {
		log.Fatal(err)
	}
	_ = done.Unlock(ctx)

	var held []string
	for st, err := range locks.List(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		held = append(held, fmt.Sprintf("%s by %s, depth %d", st.Name, st.Meta, st.Depth))
	}
	slices.Sort(held)
	fmt.Println(strings.Join(held, "\n"))
	// Output:
	// invoice-42 by worker-3, depth 1
	// invoice-43 by worker-3, depth 1
	// report by worker-3, depth 1
}
