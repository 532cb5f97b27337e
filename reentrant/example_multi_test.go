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
	fmt.Println("held:", m.Names())
	for _, name := range m.Names() {
		if err := store.Put(m.Context(), name, []byte("balance"), m.Token(name)); err != nil {
			log.Fatal(err)
		}
	}

	// Another owner asking for one of them gets none, and learns which
	// name stood in the way.
	_, err = locks.TryLockMulti(ctx, []string{"account/carol", "account/alice"})
	var busy *reentrant.NotAcquiredError
	if errors.As(err, &busy) {
		fmt.Println("not acquired, held:", busy.Names)
	}
	_ = m.Unlock(ctx)
	// Output:
	// held: [account/alice account/bob]
	// not acquired, held: [account/alice]
}
