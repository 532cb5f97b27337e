package redisstore_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/storage/redisstore"
)

// backends runs fn against miniredis and, when configured, a real Redis.
func backends(t *testing.T, fn func(t *testing.T, c *redis.Client)) {
	t.Run("miniredis", func(t *testing.T) {
		_, c := testenv.Mini(t)
		fn(t, c)
	})
	t.Run("redis", func(t *testing.T) { fn(t, testenv.Redis(t)) })
}

// TestForeignValue: a key holding something this package did not write is
// reported by name for every method, as redisstore.ErrForeign wrapping the
// server's reply, and left exactly as it was.
func TestForeignValue(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := t.Context()
		s := newStore(t, c)
		plant := map[string]func(rk string) error{
			"string":       func(rk string) error { return c.Set(ctx, rk, "someone else's", 0).Err() },
			"list":         func(rk string) error { return c.RPush(ctx, rk, "a", "b").Err() },
			"other hash":   func(rk string) error { return c.HSet(ctx, rk, "name", "x").Err() },
			"bad highest":  func(rk string) error { return c.HSet(ctx, rk, "h", "01").Err() },
			"extra field":  func(rk string) error { return c.HSet(ctx, rk, "h", "5", "x", "y").Err() },
			"value no tok": func(rk string) error { return c.HSet(ctx, rk, "h", "5", "v", "y").Err() },
			"tok above h":  func(rk string) error { return c.HSet(ctx, rk, "h", "5", "t", "6", "v", "y").Err() },
		}
		for name, fn := range plant {
			key := "foreign " + name
			rk := mustKey(t, s, key)
			if err := fn(rk); err != nil {
				t.Fatal(err)
			}
			before := testenv.Snapshot(t, c, rk)
			errs := map[string]error{
				"Put":    s.Put(ctx, key, []byte("mine"), 100),
				"Delete": s.Delete(ctx, key, 100),
			}
			_, errs["Get"] = s.Get(ctx, key)
			_, errs["Highest"] = s.Highest(ctx, key)
			for op, err := range errs {
				if !errors.Is(err, redisstore.ErrForeign) || !strings.Contains(err.Error(), rk) {
					t.Errorf("%s: %s = %v; want ErrForeign naming %q", name, op, err, rk)
				}
				if rerr := redis.Error(nil); !errors.As(err, &rerr) {
					t.Errorf("%s: %s = %v; the server's reply must keep its type", name, op, err)
				}
			}
			if after := testenv.Snapshot(t, c, rk); after != before {
				t.Errorf("%s: foreign value changed: %s -> %s", name, before, after)
			}
		}
	})
}

// TestSameRequestTwice: a write re-sent as is (what go-redis does after a
// read timeout) gives the same result and leaves the same fields; a re-sent
// write overtaken by a higher token reports stale and changes nothing.
func TestSameRequestTwice(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := t.Context()
		s := newStore(t, c)
		rk := mustKey(t, s, "k")
		for i, step := range []func() error{
			func() error { return s.Put(ctx, "k", []byte("v1"), 3) },
			func() error { return s.Delete(ctx, "k", 4) },
			func() error { return s.Put(ctx, "k", []byte("v2"), 5) },
		} {
			if err := step(); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			first := c.HGetAll(ctx, rk).Val()
			if err := step(); err != nil {
				t.Fatalf("step %d re-sent: %v", i, err)
			}
			if again := c.HGetAll(ctx, rk).Val(); !equalMaps(first, again) {
				t.Fatalf("step %d re-sent changed the record: %v -> %v", i, first, again)
			}
		}
		if err := s.Put(ctx, "k", []byte("v3"), 6); err != nil {
			t.Fatal(err)
		}
		before := c.HGetAll(ctx, rk).Val()
		err := s.Put(ctx, "k", []byte("v2"), 5)
		var se *fence.StaleError
		if !errors.As(err, &se) || se.Highest != 6 {
			t.Fatalf("re-sent write after a higher token: %v; want a StaleError with highest 6", err)
		}
		if after := c.HGetAll(ctx, rk).Val(); !equalMaps(before, after) {
			t.Fatalf("refused write changed the record: %v -> %v", before, after)
		}
	})
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v != w {
			return false
		}
	}
	return true
}

// TestScriptFlush: after SCRIPT FLUSH the scripts are re-sent with EVAL, so
// writes and reads keep working.
func TestScriptFlush(t *testing.T) {
	c := testenv.Redis(t)
	ctx := t.Context()
	s := newStore(t, c)
	if err := s.Put(ctx, "k", []byte("before"), 1); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "k", []byte("after"), 2); err != nil {
		t.Fatalf("Put after SCRIPT FLUSH: %v", err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(ctx, "k")
	if err != nil || !bytes.Equal(rec.Value, []byte("after")) || rec.Token != 2 {
		t.Fatalf("Get after SCRIPT FLUSH = %q, %d, %v; want after, 2", rec.Value, rec.Token, err)
	}
}
