package redfence_test

// This file holds one example and nothing else, so that its import block is
// exactly the example's: README.md shows both as a whole program, and
// readme_test.go checks that the program is a copy of them.

import (
	"context"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage/memory"
)

// Example takes a lock and writes under its fencing token: the store
// accepts the write because no newer holder has written with a higher one.
func Example() {
	mr, err := miniredis.Run() // any Redis; an embedded one here
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	store := memory.New() // or redisstore, sqlstore: any fenced store

	locks, err := reentrant.New(rdb) // 30 s leases, renewed every 10 s
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	lease, err := locks.Lock(ctx, "invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	// Pass the token with every write; the store refuses an older token.
	err = store.Put(lease.Context(), "invoice-42", []byte("paid"), lease.Token())
	fmt.Println("write with the lease's token:", err)
	// Output: write with the lease's token: <nil>
}
