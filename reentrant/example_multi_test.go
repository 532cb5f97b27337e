package reentrant_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage/memory"
)

// A transfer locks both accounts at once, whatever order the caller names
// them in: two transfers in opposite directions cannot deadlock. Each
// account's write carries that account's own token.
func ExampleClient_LockMulti() {
	mr, _ := miniredis.Run() // any Redis; an embedded one here
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

	m, err := locks.LockMulti(ctx, []string{"account/bob", "account/alice"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", m.Context().Err() == nil)
	for _, name := range []string{"account/alice", "account/bob"} {
		if err := store.Put(m.Context(), name, []byte("balance"), m.Lease(name).Token()); err != nil {
			log.Fatal(err)
		}
	}

	// Another owner asking for one of them, without waiting, gets none.
	_, err = locks.LockMulti(ctx, []string{"account/carol", "account/alice"}, reentrant.WithRetry(reentrant.NoRetry()))
	fmt.Println("not acquired:", errors.Is(err, reentrant.ErrNotAcquired))
	_ = m.Unlock(ctx)
	// Output:
	// held: true
	// not acquired: true
}
