package reentrant_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
)

// A writer writes with its token; readers read at their epoch with
// storage.GetAt, which refuses a record a newer writer wrote since.
func ExampleRWMutex() {
	locks, stop := newLocks()
	defer stop()
	ctx := context.Background()
	store := memory.New()
	doc := locks.RWMutex("doc-7")

	w, err := doc.Lock(ctx) // one writer, no reader
	if err != nil {
		log.Fatal(err)
	}
	_ = store.Put(w.Context(), "doc-7", []byte("v1"), w.Token())
	_ = w.Unlock(ctx)

	r, err := doc.RLock(ctx) // any number of readers, no writer
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("the reader's epoch is the last write's token:", r.Token() == w.Token())
	rec, err := storage.GetAt(r.Context(), store, "doc-7", r.Token())
	fmt.Printf("read at its epoch -> %s %v\n", rec.Value, err)

	// Suppose the reader stalls past its lease: a newer writer writes.
	_ = r.Unlock(ctx)
	w2, err := doc.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_ = store.Put(w2.Context(), "doc-7", []byte("v2"), w2.Token())
	_ = w2.Unlock(ctx)
	_, err = storage.GetAt(ctx, store, "doc-7", r.Token())
	fmt.Println("the late read is refused:", errors.Is(err, fence.ErrStale))
	// Output:
	// the reader's epoch is the last write's token: true
	// read at its epoch -> v1 <nil>
	// the late read is refused: true
}

// Each permit owns the writes of its slot's key: a permit that expired is
// refused there once its slot has a new holder.
func ExampleSemaphore() {
	locks, stop := newLocks()
	defer stop()
	ctx := context.Background()
	store := memory.New()
	workers := locks.Semaphore("exporters", 2) // at most 2 at once

	a, err := workers.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	b, err := workers.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("slots:", a.Slot(), b.Slot(), "key:", a.SlotKey("export"))
	_, err = workers.TryAcquire(ctx)
	fmt.Println("a third ->", err)

	// a's permit ends (here released; expired works the same) and a new
	// holder gets its slot, with a higher token.
	_ = store.Put(a.Context(), a.SlotKey("export"), []byte("a"), a.Token())
	_ = a.Unlock(ctx)
	c, err := workers.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_ = store.Put(c.Context(), c.SlotKey("export"), []byte("c"), c.Token())
	err = store.Put(ctx, a.SlotKey("export"), []byte("a, late"), a.Token())
	fmt.Println("same slot:", c.Slot() == a.Slot(), "late write refused:", errors.Is(err, fence.ErrStale))
	_ = b.Unlock(ctx)
	_ = c.Unlock(ctx)
	// Output:
	// slots: 0 1 key: export#slot0
	// a third -> reentrant: tryacquire "exporters": not acquired: all 2 permits are held, or others wait for one
	// same slot: true late write refused: true
}
