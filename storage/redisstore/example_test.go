package redisstore_test

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
	"github.com/redfence/redfence/storage/redisstore"
)

// Kleppmann's scenario, with the locks and the fenced records on one Redis:
// worker A is paused past its lease, worker B takes the lock and writes, and
// A's late write is refused.
func Example() {
	mr, _ := miniredis.Run() // any Redis; an embedded one here
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	locks, err := reentrant.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	store, err := redisstore.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	a, err := locks.Lock(ctx, "invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	// A is paused past its lease: here Redis's clock jumps ahead instead.
	mr.FastForward(time.Minute)

	b, err := locks.Lock(ctx, "invoice-42") // the lock expired: B gets it
	if err != nil {
		log.Fatal(err)
	}
	err = store.Put(b.Context(), "invoice-42", []byte("refunded"), b.Token())
	fmt.Println("B writes with a higher token:", b.Token() > a.Token(), "->", err)
	_ = b.Unlock(ctx)

	// A wakes up, still believing it holds the lock, and writes.
	err = store.Put(ctx, "invoice-42", []byte("paid"), a.Token())
	fmt.Println("A writes with its old token -> stale:", errors.Is(err, fence.ErrStale))

	rec, err := store.Get(ctx, "invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("invoice-42: %s (B's token: %v)\n", rec.Value, rec.Token == b.Token())
	// Output:
	// B writes with a higher token: true -> <nil>
	// A writes with its old token -> stale: true
	// invoice-42: refunded (B's token: true)
}
