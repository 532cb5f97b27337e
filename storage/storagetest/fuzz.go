package storagetest

import (
	"context"
	"errors"
	"testing"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
)

// Fuzz fuzzes s against the in-memory reference: arbitrary keys (any
// bytes, braces and NULs included), values and tokens, put, deleted, or put
// again with an older token, every answer compared. Both stores keep their
// state between iterations, so it explores sequences as well as single
// writes. Tokens are taken modulo maxToken unless it is 0, for a store that
// refuses larger tokens by design. Keys that storage.CheckKey refuses must
// be refused by s with storage.ErrInvalid, as by every adapter. Call it
// once per fuzz target, after any f.Add of the store's own seeds.
func Fuzz(f *testing.F, s storage.Store, maxToken uint64) {
	f.Add(byte(0), "k", []byte("v"), uint64(1))
	f.Add(byte(2), "{a}", []byte{}, uint64(5))
	f.Add(byte(0), "\x00", []byte("x"), uint64(0))
	z := &fuzzer{store: s, ref: memory.New()}
	f.Fuzz(func(t *testing.T, op byte, key string, value []byte, tok uint64) {
		if maxToken != 0 {
			tok %= maxToken
		}
		z.step(t, op, key, value, tok)
	})
}

type fuzzer struct {
	store, ref storage.Store
}

// step applies one operation chosen by op (put, delete, or a stale put
// with token-1 after a put) to both stores and fails t on any difference.
func (z *fuzzer) step(t *testing.T, op byte, key string, value []byte, tok uint64) {
	t.Helper()
	ctx := context.Background()
	if storage.CheckKey(key) != nil {
		if err := z.store.Put(ctx, key, value, fence.Token(tok|1)); !errors.Is(err, storage.ErrInvalid) {
			t.Fatalf("Put with a %d-byte key: %v, want ErrInvalid", len(key), err)
		}
		return
	}
	t1 := fence.Token(tok)
	var gotErr, refErr error
	switch op % 3 {
	case 0:
		gotErr, refErr = z.store.Put(ctx, key, value, t1), z.ref.Put(ctx, key, value, t1)
	case 1:
		gotErr, refErr = z.store.Delete(ctx, key, t1), z.ref.Delete(ctx, key, t1)
	default:
		gotErr, refErr = z.store.Put(ctx, key, value, t1), z.ref.Put(ctx, key, value, t1)
		if refErr == nil && t1 > 1 {
			stale := []byte("stale")
			g, r := z.store.Put(ctx, key, stale, t1-1), z.ref.Put(ctx, key, stale, t1-1)
			if !errors.Is(g, fence.ErrStale) || !errors.Is(r, fence.ErrStale) {
				t.Fatalf("Put(%q, token %d) after %d: store %v, reference %v; want ErrStale", key, t1-1, t1, g, r)
			}
		}
	}
	if class(gotErr) != class(refErr) {
		t.Fatalf("op %d on %q with token %d: store %v, reference %v", op%3, key, t1, gotErr, refErr)
	}
	g, gerr := z.store.Get(ctx, key)
	r, rerr := z.ref.Get(ctx, key)
	if class(gerr) != class(rerr) || string(g.Value) != string(r.Value) || g.Token != r.Token {
		t.Fatalf("Get(%q): store %q@%d (%v), reference %q@%d (%v)", key, g.Value, g.Token, gerr, r.Value, r.Token, rerr)
	}
	if gerr == nil && g.Value == nil {
		t.Fatalf("Get(%q) returned a nil value for a found record", key)
	}
	gh, _ := z.store.Highest(ctx, key)
	rh, _ := z.ref.Highest(ctx, key)
	if gh != rh {
		t.Fatalf("Highest(%q): store %d, reference %d", key, gh, rh)
	}
}

func class(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, fence.ErrStale):
		return "stale"
	case errors.Is(err, fence.ErrNoToken):
		return "no-token"
	case errors.Is(err, storage.ErrNotFound):
		return "not-found"
	case errors.Is(err, storage.ErrInvalid):
		return "invalid"
	}
	return "other: " + err.Error()
}
