package reentrant_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage/memory"
)

// The examples run on an embedded Redis (miniredis), so that they need
// nothing installed; any Redis, Sentinel or Cluster client works the same.
// Tokens on a fresh Redis start at 1.

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
	fmt.Println("write with token", lease.Token(), "->", err)

	// The same context reenters: same token, one level deeper.
	inner, err := locks.Lock(lease.Context(), "invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reentered: token", inner.Token(), "depth", inner.Depth())
	_ = inner.Unlock(ctx)
	_ = lease.Unlock(ctx)

	// A later holder gets a higher token; the store now refuses the old one.
	next, err := locks.Lock(ctx, "invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	_ = store.Put(next.Context(), "invoice-42", []byte("refunded"), next.Token())
	err = store.Put(ctx, "invoice-42", []byte("late"), lease.Token())
	fmt.Println("late write with token", lease.Token(), "stale:", errors.Is(err, fence.ErrStale))
	_ = next.Unlock(ctx)
	// Output:
	// write with token 1 -> <nil>
	// reentered: token 1 depth 2
	// late write with token 1 stale: true
}

func ExampleClient_Lock() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locks, err := reentrant.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	store := memory.New()
	ctx := context.Background()

	lease, err := locks.Lock(ctx, "invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	err = store.Put(lease.Context(), "invoice-42", []byte("paid"), lease.Token())
	fmt.Println("put with token", lease.Token(), "->", err)

	// A plain context is another owner, which waits as long as its context
	// allows. That context bounds the wait only, never the lease.
	wait, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = locks.Lock(wait, "invoice-42")
	fmt.Println("gave up:", errors.Is(err, reentrant.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded))

	if err := lease.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	next, err := locks.Lock(ctx, "invoice-42") // free again: a new ownership, a higher token
	if err != nil {
		log.Fatal(err)
	}
	defer next.Unlock(ctx)
	fmt.Println("next owner's token:", next.Token())
	// Output:
	// put with token 1 -> <nil>
	// gave up: true true
	// next owner's token: 2
}

func ExampleClient_TryLock() {
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
	fmt.Println("acquired with token", lease.Token())
	// Output:
	// busy, skipping this run
	// acquired with token 2
}

func ExampleClient_Do() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locks, err := reentrant.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	store := memory.New()
	ctx := context.Background()

	// Do locks, runs the function and always unlocks. The function gets the
	// lease's context and the token to pass to every fenced write.
	err = locks.Do(ctx, "nightly-report", func(ctx context.Context, token fence.Token) error {
		return store.Put(ctx, "report/latest", []byte("42 invoices"), token)
	})
	if err != nil {
		log.Fatal(err)
	}
	rec, err := store.Get(ctx, "report/latest")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s, written with token %d\n", rec.Value, rec.Token)
	// Output:
	// 42 invoices, written with token 1
}

// A lock call made with a lease's context reenters the lock: the same owner,
// the same token, one level deeper. A helper that takes the lock can so be
// called both on its own and from code that already holds it.
func ExampleClient_Lock_reentry() {
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

	// charge takes the account's lock, whoever calls it.
	charge := func(ctx context.Context, cents int) error {
		lease, err := locks.Lock(ctx, "account-7")
		if err != nil {
			return err
		}
		defer lease.Unlock(ctx)
		fmt.Println("charge", cents, "under token", lease.Token(), "at depth", lease.Depth())
		return nil
	}

	lease, err := locks.Lock(ctx, "account-7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("checkout under token", lease.Token(), "at depth", lease.Depth())
	if err := charge(lease.Context(), 1250); err != nil { // reenters
		log.Fatal(err)
	}

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
	// checkout under token 1 at depth 1
	// charge 1250 under token 1 at depth 2
	// another owner refused: true
	// held: false
}
