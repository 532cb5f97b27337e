package storage_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"testing"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testkit/phrase"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
)

// getAtOK checks GetAt returns key's record, value and token, at epoch.
func getAtOK(t *testing.T, s storage.Store, key string, epoch fence.Token, value string, tok fence.Token) {
	t.Helper()
	rec, err := storage.GetAt(t.Context(), s, key, epoch)
	if err != nil {
		t.Fatalf("GetAt(%q, epoch %d): %v; want %q token %d", key, epoch, err, value, tok)
	}
	if string(rec.Value) != value || rec.Token != tok {
		t.Fatalf("GetAt(%q, epoch %d) = %q token %d; want %q token %d", key, epoch, rec.Value, rec.Token, value, tok)
	}
}

// getAtStale checks GetAt refuses key at epoch with a *fence.StaleError of
// the reader's token and newer, and a message that says so with both.
func getAtStale(t *testing.T, s storage.Store, key string, epoch, newer fence.Token) {
	t.Helper()
	rec, err := storage.GetAt(t.Context(), s, key, epoch)
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("GetAt(%q, epoch %d) = %q token %d, %v; want fence.ErrStale", key, epoch, rec.Value, rec.Token, err)
	}
	if rec.Value != nil || rec.Token != fence.None {
		t.Errorf("GetAt(%q, epoch %d) returned a record (%q token %d) with its error", key, epoch, rec.Value, rec.Token)
	}
	if errors.Is(err, storage.ErrNotFound) {
		t.Errorf("GetAt(%q, epoch %d): %v also matches ErrNotFound", key, epoch, err)
	}
	var se *fence.StaleError
	if !errors.As(err, &se) || se.Token != epoch || se.Highest != newer {
		t.Fatalf("GetAt(%q, epoch %d): %#v; want a *fence.StaleError{Token: %d, Highest: %d}", key, epoch, err, epoch, newer)
	}
	msg := err.Error()
	for _, want := range []string{"newer writer", "reader's epoch", fmt.Sprint(epoch), fmt.Sprint(newer), fmt.Sprintf("%q", key)} {
		if !strings.Contains(msg, want) {
			t.Errorf("GetAt(%q, epoch %d): %q does not say %q", key, epoch, msg, want)
		}
	}
	if p := phrase.Repeated(msg, 4); p != "" {
		t.Errorf("GetAt(%q, epoch %d): %q says %q twice", key, epoch, msg, p)
	}
}

// getAtNotFound checks GetAt reports key absent at epoch, as Get does, and
// not stale.
func getAtNotFound(t *testing.T, s storage.Store, key string, epoch fence.Token) {
	t.Helper()
	rec, err := storage.GetAt(t.Context(), s, key, epoch)
	if !errors.Is(err, storage.ErrNotFound) || errors.Is(err, fence.ErrStale) {
		t.Fatalf("GetAt(%q, epoch %d) = %q token %d, %v; want ErrNotFound, not stale", key, epoch, rec.Value, rec.Token, err)
	}
	_, gerr := s.Get(t.Context(), key)
	if err.Error() != gerr.Error() {
		t.Errorf("GetAt(%q, epoch %d): %q; want Get's own error %q", key, epoch, err, gerr)
	}
}

func TestGetAt(t *testing.T) {
	ctx := t.Context()
	s := memory.New()
	put := func(key, v string, tok fence.Token) {
		t.Helper()
		if err := s.Put(ctx, key, []byte(v), tok); err != nil {
			t.Fatal(err)
		}
	}
	del := func(key string, tok fence.Token) {
		t.Helper()
		if err := s.Delete(ctx, key, tok); err != nil {
			t.Fatal(err)
		}
	}

	put("k", "v5", 5)
	t.Run("AtEpoch", func(t *testing.T) { getAtOK(t, s, "k", 5, "v5", 5) })
	t.Run("BelowEpoch", func(t *testing.T) {
		getAtOK(t, s, "k", 6, "v5", 5)
		getAtOK(t, s, "k", 1<<63, "v5", 5)
	})
	t.Run("AboveEpoch", func(t *testing.T) {
		getAtStale(t, s, "k", 4, 5)
		getAtStale(t, s, "k", 1, 5)
	})
	t.Run("EpochNone", func(t *testing.T) {
		getAtStale(t, s, "k", fence.None, 5)
		getAtNotFound(t, s, "never", fence.None)
	})
	t.Run("Missing", func(t *testing.T) {
		getAtNotFound(t, s, "never", 1)
		getAtNotFound(t, s, "never", 1<<63)
	})
	t.Run("DeletedByNewerWriter", func(t *testing.T) {
		put("d", "v3", 3)
		del("d", 8)
		getAtStale(t, s, "d", 3, 8)
		getAtStale(t, s, "d", 7, 8)
		getAtStale(t, s, "d", fence.None, 8)
		getAtNotFound(t, s, "d", 8)
		getAtNotFound(t, s, "d", 9)
	})
	t.Run("NewerWriterAfterDelete", func(t *testing.T) {
		put("r", "v2", 2)
		del("r", 2)
		getAtNotFound(t, s, "r", 2)
		put("r", "v9", 9)
		getAtStale(t, s, "r", 2, 9)
		getAtOK(t, s, "r", 9, "v9", 9)
	})
	t.Run("InvalidKey", func(t *testing.T) {
		for _, key := range []string{"", strings.Repeat("x", storage.MaxKeyLen+1)} {
			if _, err := storage.GetAt(ctx, s, key, 5); !errors.Is(err, storage.ErrInvalid) {
				t.Errorf("GetAt with a key of %d bytes: %v; want ErrInvalid", len(key), err)
			}
		}
	})
	t.Run("CancelledContext", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := storage.GetAt(cctx, s, "k", 5); !errors.Is(err, context.Canceled) {
			t.Errorf("GetAt with a cancelled context: %v; want context.Canceled", err)
		}
	})
}

// racedStore is a store in which a newer writer writes key between GetAt's
// Get, which finds nothing, and its Highest; or whose Highest fails.
type racedStore struct {
	storage.Store
	highest    fence.Token
	highestErr error
}

func (s racedStore) Get(ctx context.Context, key string) (storage.Record, error) {
	return storage.Record{}, fmt.Errorf("raced: get %q: %w", key, storage.ErrNotFound)
}

func (s racedStore) Highest(ctx context.Context, key string) (fence.Token, error) {
	return s.highest, s.highestErr
}

func TestGetAtAbsentThenWritten(t *testing.T) {
	s := racedStore{Store: memory.New(), highest: 12}
	getAtStale(t, s, "k", 11, 12)
	getAtNotFound(t, racedStore{Store: memory.New(), highest: 11}, "k", 11)
}

func TestGetAtHighestFails(t *testing.T) {
	boom := errors.New("raced: highest: connection reset")
	_, err := storage.GetAt(t.Context(), racedStore{Store: memory.New(), highestErr: boom}, "k", 11)
	if err != boom {
		t.Fatalf("GetAt when Highest fails: %v; want Highest's error as it is", err)
	}
}

// A reader holding a read lease carries its epoch: the token of the last
// write granted before the lease. GetAt refuses a record written since.
func ExampleGetAt() {
	store := memory.New()
	ctx := context.Background()
	if err := store.Put(ctx, "invoice-42", []byte("paid"), 7); err != nil {
		log.Fatal(err)
	}

	// A reader whose lease was granted after the write of token 7.
	rec, err := storage.GetAt(ctx, store, "invoice-42", 7)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (token %d)\n", rec.Value, rec.Token)

	// A writer with token 9 gets in: a reader of epoch 7 is told.
	if err := store.Put(ctx, "invoice-42", []byte("refunded"), 9); err != nil {
		log.Fatal(err)
	}
	_, err = storage.GetAt(ctx, store, "invoice-42", 7)
	var stale *fence.StaleError
	if errors.As(err, &stale) {
		fmt.Println("epoch", stale.Token, "but written with", stale.Highest)
	}
	fmt.Println(err)
	// Output:
	// paid (token 7)
	// epoch 7 but written with 9
	// storage: get "invoice-42" at epoch 7: a newer writer wrote it since the reader's epoch (record token 9): fence: stale token 7 (highest accepted 9)
}
