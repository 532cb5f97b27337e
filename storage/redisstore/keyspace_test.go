package redisstore_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/redisstore"
)

// lockCollision reports which key of the lock k the store key rk would
// overwrite, or "" if none. Every string field of scripts.Keys is compared, by
// reflection, so a key the lock's layout gains later is checked as well.
//
// Why no store key can ever collide, whatever the prefixes, names and keys:
// a lock key is P + ":{" + E(N) + "}" + S with S one of "", ":q" and ":t" (and
// older layouts used ":fence", ":released" and ":rel:" + anything, which
// the test still keeps apart), and a store key is Q + ":{" + E(K) +
// "}:rec". Neither prefix holds a brace (both packages refuse one) and the
// escaping E leaves no brace in a name or key, so in either kind of key the
// first '{' opens the tag and the first '}' after it closes it. Reading a
// key that way recovers its suffix after the tag unambiguously, and ":rec"
// is none of the lock's suffixes: not "", ":q" or ":t". Two keys with different suffixes are different strings.
func lockCollision(rk string, k scripts.Keys) string {
	v := reflect.ValueOf(k)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.String && f.String() == rk {
			return v.Type().Field(i).Name + " " + f.String()
		}
	}
	return ""
}

// storeKey returns the Redis key of key's record in a store with prefix,
// and false when the store refuses the prefix or the key (nothing is
// stored then, so nothing can collide).
func storeKey(t *testing.T, prefix, key string) (string, bool) {
	t.Helper()
	// New and Key never talk to the server: the client is never dialled.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
	if err != nil {
		if !errors.Is(err, storage.ErrInvalid) {
			t.Fatalf("New(prefix %q): %v", prefix, err)
		}
		return "", false
	}
	rk, err := s.Key(key)
	if err != nil {
		if !errors.Is(err, storage.ErrInvalid) {
			t.Fatalf("Key(%q): %v", key, err)
		}
		return "", false
	}
	return rk, true
}

// checkApart fails t if the store key of key under storePrefix is one of
// the keys of lock name under lockPrefix. Prefixes and names the lock
// refuses are skipped: no lock keys exist for them.
func checkApart(t *testing.T, lockPrefix, name, storePrefix, key string) {
	t.Helper()
	if scripts.CheckPrefix(lockPrefix) != nil || scripts.CheckName(name) != nil {
		return
	}
	rk, ok := storeKey(t, storePrefix, key)
	if !ok {
		return
	}
	if what := lockCollision(rk, scripts.KeysFor(lockPrefix, name)); what != "" {
		t.Fatalf("store key %q (prefix %q, key %q) is the lock's %s (prefix %q, name %q)",
			rk, storePrefix, key, what, lockPrefix, name)
	}
}

// fragments are the pieces random prefixes, names and keys are built from:
// the bytes that delimit a hash tag or a suffix, the escapes, and the
// suffixes themselves, so that near misses are common.
var fragments = []string{
	"{", "}", "%", "%7B", "%7D", "%25", "%7", ":", "::", "rec", ":rec", "rel", ":rel", ":rel:",
	"fence", ":fence", "released", ":released", "redfence", "redfence:store", "a", "x", "\x00", "é", "\xff",
}

func adversarial(min int) *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		parts := rapid.SliceOfN(rapid.SampledFrom(fragments), min, 6).Draw(t, "parts")
		return strings.Join(parts, "")
	})
}

// TestKeysApartFromLockKeys: over random prefixes, names and keys built
// from braces, escapes, separators and the lock's own suffixes, no store
// key is a lock key or a channel. Half the cases
// use the same prefix for both and the lock name as the key, the case in
// which the old layout (no suffix) made the store's key the lock's hash.
func TestKeysApartFromLockKeys(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		lockPrefix := adversarial(1).Draw(rt, "lockPrefix")
		name := adversarial(0).Draw(rt, "name")
		storePrefix, key := lockPrefix, name
		if !rapid.Bool().Draw(rt, "same") {
			storePrefix = adversarial(1).Draw(rt, "storePrefix")
			key = adversarial(0).Draw(rt, "key")
		}
		checkApart(t, lockPrefix, name, storePrefix, key)
	})
}

// FuzzKeysApartFromLockKeys is the same check over arbitrary bytes.
func FuzzKeysApartFromLockKeys(f *testing.F) {
	for _, s := range [][4]string{
		{"redfence", "k", "redfence", "k"},
		{"redfence:store", "k", "redfence:store", "k"},
		{"p", "x}:rec", "p", "x"},
		{"p", "x", "p", "x}:rec"},
		{"p", "x:rec", "p", "x"},
		{"p:{x}", "y", "p", "x"},
		{"p", ":rel", "p", ""},
		{":", ":", ":", ":"},
		{"%", "%7B%7D", "%", "{}"},
		{"a", "rec", "a", "rel"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, lockPrefix, name, storePrefix, key string) {
		checkApart(t, lockPrefix, name, storePrefix, key)
		checkApart(t, lockPrefix, name, lockPrefix, name)
	})
}

// TestLockBesideRecordRedis: a store and a lock client share the prefix
// "redfence" and use one string as key and lock name. Taking, holding,
// losing and releasing the lock leaves the store's record and fence alone,
// and the store's writes leave the lock alone. The lock is taken with the
// lock scripts themselves (package lua) rather than package reentrant, so
// the test pins the key layouts, not the lock client.
func TestLockBesideRecordRedis(t *testing.T) {
	c := testenv.Redis(t)
	ctx := t.Context()
	const prefix = "redfence"
	s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.Unique(t)
	k := scripts.KeysFor(prefix, name)
	rk := mustKey(t, s, name)
	t.Cleanup(func() { cleanupKeys(t, c.Options().Addr, k.Lock, k.Queue, rk) })

	if err := s.Put(ctx, name, []byte("v10"), 10); err != nil {
		t.Fatal(err)
	}
	a, err := scripts.Acquire(ctx, c, k, &scripts.Request{Owner: "some-owner", TTL: 200 * time.Millisecond, Level: "req-1"})
	if err != nil || !a.OK {
		t.Fatalf("acquire = %+v, %v", a, err)
	}
	lock, err := testenv.LockFields(ctx, c, k.Lock)
	if err != nil {
		t.Fatal(err)
	}

	// While the lock is held, the store reads and writes its own record.
	if err := s.Put(ctx, name, []byte("v10b"), 10); err != nil {
		t.Fatalf("Put while the lock is held: %v", err)
	}
	if got, _ := testenv.LockFields(ctx, c, k.Lock); !equalMaps(got, lock) {
		t.Fatalf("the store's Put changed the lock hash %s: %v; want %v", k.Lock, got, lock)
	}

	// The lease runs out, and another owner takes the lock.
	time.Sleep(250 * time.Millisecond)
	b, err := scripts.Acquire(ctx, c, k, &scripts.Request{Owner: "other-owner", TTL: time.Second, Level: "req-2"})
	if err != nil || !b.OK || b.Token != a.Token+1 {
		t.Fatalf("acquire after the lease ran out = %+v, %v; want token %d", b, err, a.Token+1)
	}

	rec, err := s.Get(ctx, name)
	if err != nil || string(rec.Value) != "v10b" || rec.Token != 10 {
		t.Fatalf("Get after the lock expired = %q@%d, %v; want v10b@10", rec.Value, rec.Token, err)
	}
	if h, err := s.Highest(ctx, name); err != nil || h != 10 {
		t.Fatalf("Highest after the lock expired = %d, %v; want 10", h, err)
	}
	err = s.Put(ctx, name, []byte("late"), 3)
	var se *fence.StaleError
	if !errors.As(err, &se) || se.Token != 3 || se.Highest != 10 {
		t.Fatalf("Put with token 3 after 10: %v; want StaleError{3, 10}", err)
	}
	if rec, err := s.Get(ctx, name); err != nil || string(rec.Value) != "v10b" || rec.Token != 10 {
		t.Fatalf("Get after the stale Put = %q@%d, %v; want v10b@10", rec.Value, rec.Token, err)
	}
	if n, err := scripts.Release(ctx, c, k, "other-owner", b.Token, "req-2", scripts.Tokens{}); err != nil || n.Depth != 0 {
		t.Fatalf("release = %+v, %v; want 0", n, err)
	}
	st, err := scripts.Inspect(ctx, c, k)
	if err != nil || st.Counter != b.Token {
		t.Fatalf("the lock's counter reads %+v, %v; want %d, untouched by the store", st, err, b.Token)
	}
}

// cleanupKeys deletes keys through a client of its own. A prefix-wide
// sweep, as newStore's cleanup does, would be wrong here: the prefix is
// the lock's default, which other tests and programs share.
func cleanupKeys(t *testing.T, addr string, keys ...string) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.Del(context.Background(), keys...).Err(); err != nil {
		t.Logf("cleanup of %q: %v", keys, err)
	}
}
