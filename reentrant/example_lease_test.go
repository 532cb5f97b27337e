package reentrant_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/reentrant"
)

// Without renewal, the holder keeps its lease alive itself, between steps
// of its work, and stops when Extend says the lock is no longer its own.
func ExampleLease_Extend() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locks, err := reentrant.New(rdb, reentrant.WithoutRenewal(), reentrant.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
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
func ExampleLease_Done() {
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
	mr.SetTime(time.Now().Add(time.Minute))

	step := time.NewTicker(10 * time.Millisecond)
	defer step.Stop()
	for {
		select {
		case <-lease.Done():
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

	lease, err := locks.Lock(ctx, "invoice-42", reentrant.WithMetadata("worker-3 job 1842"))
	if err != nil {
		log.Fatal(err)
	}
	st, err := locks.Inspect(ctx, "invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("held: %v, token %d, depth %d, by %q, ours: %v\n",
		st.Held, st.Token, st.Depth, st.Meta, st.Owner == string(lease.Owner()))

	_ = lease.Unlock(ctx)
	st, err = locks.Inspect(ctx, "invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("held: %v, last token %d\n", st.Held, st.LastToken)
	// Output:
	// held: true, token 1, depth 1, by "worker-3 job 1842", ours: true
	// held: false, last token 1
}
