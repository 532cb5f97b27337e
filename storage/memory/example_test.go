package memory_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
)

// A fenced store keeps, per key, the highest token it has accepted, and
// refuses writes with a lower one. In a program the tokens come from
// reentrant.Lease.Token; here they are written out.
func Example() {
	store := memory.New()
	ctx := context.Background()

	// The holder with token 7 writes, as often as it likes.
	if err := store.Put(ctx, "invoice-42", []byte("draft"), 7); err != nil {
		log.Fatal(err)
	}
	if err := store.Put(ctx, "invoice-42", []byte("paid"), 7); err != nil {
		log.Fatal(err)
	}

	// A paused holder of an older lock, token 5, wakes up: refused.
	err := store.Put(ctx, "invoice-42", []byte("cancelled"), 5)
	var stale *fence.StaleError
	if errors.As(err, &stale) {
		fmt.Println("refused token", stale.Token, "after", stale.Highest)
	}

	rec, err := store.Get(ctx, "invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (token %d)\n", rec.Value, rec.Token)

	// Delete keeps the fence: the old holder stays out.
	if err := store.Delete(ctx, "invoice-42", 7); err != nil {
		log.Fatal(err)
	}
	_, err = store.Get(ctx, "invoice-42")
	fmt.Println("deleted:", errors.Is(err, storage.ErrNotFound))
	err = store.Put(ctx, "invoice-42", []byte("cancelled"), 5)
	fmt.Println("still stale:", errors.Is(err, fence.ErrStale))
	// Output:
	// refused token 5 after 7
	// paid (token 7)
	// deleted: true
	// still stale: true
}
