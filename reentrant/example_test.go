package reentrant_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage/memory"
)

func Example() {
	mr := miniredis.NewMiniRedis() // any Redis; an embedded one here
	_ = mr.Start()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	locks, err := reentrant.New(rdb) // 30 s lease, renewed every 10 s
	if err != nil {
		panic(err)
	}
	defer locks.Close()
	store := memory.New() // or redisstore, sqlstore: any fenced store
	ctx := context.Background()

	lease, err := locks.Lock(ctx, "invoice-42") // ctx bounds the wait only
	if err != nil {
		panic(err)
	}
	// Pass the token with every write; work under lease.Context(), which is
	// cancelled if the lease is lost.
	err = store.Put(lease.Context(), "invoice-42", []byte("paid"), lease.Token())
	fmt.Println("write with token", lease.Token(), "->", err)

	// The same context reenters: same token, one level deeper.
	inner, _ := locks.Lock(lease.Context(), "invoice-42")
	fmt.Println("reentered: token", inner.Token(), "depth", inner.Depth())
	_ = inner.Unlock(ctx)
	_ = lease.Unlock(ctx)

	// A later holder gets a higher token; the store now refuses the old one.
	next, _ := locks.Lock(ctx, "invoice-42")
	_ = store.Put(ctx, "invoice-42", []byte("refunded"), next.Token())
	err = store.Put(ctx, "invoice-42", []byte("late"), lease.Token())
	fmt.Println("late write with token", lease.Token(), "stale:", errors.Is(err, fence.ErrStale))
	_ = next.Unlock(ctx)
	// Output:
	// write with token 1 -> <nil>
	// reentered: token 1 depth 2
	// late write with token 1 stale: true
}

func ExampleClient_Do() {
	mr := miniredis.NewMiniRedis()
	_ = mr.Start()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locks, _ := reentrant.New(rdb)
	defer locks.Close()

	// Do locks, runs the function and always unlocks.
	err := locks.Do(context.Background(), "nightly-report", func(ctx context.Context, t fence.Token) error {
		fmt.Println("running under token", t)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// running under token 1
	// err: <nil>
}

func ExampleClient_TryLock() {
	mr := miniredis.NewMiniRedis()
	_ = mr.Start()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locks, _ := reentrant.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	held, _ := locks.Lock(ctx, "job")
	_, err := locks.TryLock(ctx, "job") // a different owner: answers at once
	fmt.Println(errors.Is(err, reentrant.ErrNotAcquired))
	_ = held.Unlock(ctx)
	// Output: true
}
