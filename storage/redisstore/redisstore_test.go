package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testkit/netfault"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/redisstore"
	"github.com/redfence/redfence/storage/storagetest"
)

// newStore returns a Store on c under a prefix no other test uses, and
// deletes its keys when the test ends.
func newStore(t *testing.T, c *redis.Client) *redisstore.Store {
	t.Helper()
	prefix := "redfence:test:" + testenv.Unique(t)
	s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanup(t, c.Options().Addr, prefix) })
	return s
}

// cleanup deletes every key under prefix through a client of its own: the
// test's client may be closed by then (the broken-backend test closes it).
func cleanup(t *testing.T, addr, prefix string) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	glob := strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(prefix) + ":*"
	iter := c.Scan(ctx, 0, glob, 1000).Iterator()
	for iter.Next(ctx) {
		c.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Logf("cleanup of %s: %v", prefix, err)
	}
}

func TestConformanceMiniredis(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Store {
		_, c := testenv.Mini(t)
		return newStore(t, c)
	},
		storagetest.WithFault(func(t *testing.T) storagetest.Fault {
			// The server goes away: miniredis closes its listener and
			// every connection, then comes back with its data.
			m, c := testenv.Mini(t)
			s := newStore(t, c)
			return storagetest.Fault{
				Store: s,
				Break: m.Close,
				Reopen: func(t *testing.T) storage.Store {
					if err := m.Restart(); err != nil {
						t.Fatal(err)
					}
					// A fresh client: the old one's pool backs off
					// after the failed dials.
					c2 := redis.NewClient(&redis.Options{Addr: m.Addr()})
					t.Cleanup(func() { _ = c2.Close() })
					s2, err := redisstore.New(c2, redisstore.WithPrefix(prefixOf(t, s)))
					if err != nil {
						t.Fatal(err)
					}
					return s2
				},
			}
		}),
	)
}

func TestConformanceRedis(t *testing.T) {
	testenv.RedisAddr(t) // skip the whole suite, not each subtest, without a server
	storagetest.Run(t, func(t *testing.T) storage.Store { return newStore(t, testenv.Redis(t)) },
		storagetest.WithFault(func(t *testing.T) storagetest.Fault {
			// Redis becomes unreachable: a proxy in front of it resets
			// every connection and refuses new ones.
			proxy, err := netfault.New(testenv.RedisAddr(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = proxy.Close() })
			c := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			direct := testenv.Redis(t)
			s := newStore(t, direct) // cleans up through the direct client
			s, err = redisstore.New(c, redisstore.WithPrefix(prefixOf(t, s)))
			if err != nil {
				t.Fatal(err)
			}
			return storagetest.Fault{
				Store: s,
				Break: func() {
					proxy.RefuseNew(true)
					proxy.ResetAll()
				},
				Reopen: func(t *testing.T) storage.Store {
					s2, err := redisstore.New(direct, redisstore.WithPrefix(prefixOf(t, s)))
					if err != nil {
						t.Fatal(err)
					}
					return s2
				},
			}
		}),
	)
}

func prefixOf(t *testing.T, s *redisstore.Store) string {
	return strings.TrimSuffix(mustKey(t, s, "x"), ":{x}:rec")
}

func mustKey(t *testing.T, s *redisstore.Store, key string) string {
	t.Helper()
	rk, err := s.Key(key)
	if err != nil {
		t.Fatal(err)
	}
	return rk
}

func TestNewInvalid(t *testing.T) {
	_, c := testenv.Mini(t)
	for name, f := range map[string]func() (*redisstore.Store, error){
		"nil client":   func() (*redisstore.Store, error) { return redisstore.New(nil) },
		"empty prefix": func() (*redisstore.Store, error) { return redisstore.New(c, redisstore.WithPrefix("")) },
		"open brace":   func() (*redisstore.Store, error) { return redisstore.New(c, redisstore.WithPrefix("a{b")) },
		"close brace":  func() (*redisstore.Store, error) { return redisstore.New(c, redisstore.WithPrefix("a}b")) },
		"nil option":   func() (*redisstore.Store, error) { return redisstore.New(c, nil) },
	} {
		if s, err := f(); !errors.Is(err, storage.ErrInvalid) || s != nil {
			t.Errorf("%s: New = %v, %v; want nil, storage.ErrInvalid", name, s, err)
		}
	}
	s, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustKey(t, s, "k"); got != redisstore.DefaultPrefix+":{k}:rec" {
		t.Errorf("default key layout %q; want %q", got, redisstore.DefaultPrefix+":{k}:rec")
	}
}

// FuzzStore sends arbitrary keys (any bytes, braces and NULs included),
// values and tokens to the Redis store on miniredis and checks every answer
// against the in-memory reference.
func FuzzStore(f *testing.F) {
	f.Add(byte(1), "%7B}{", []byte{0, 1}, uint64(1<<63))
	_, rdb := testenv.Mini(f)
	s, err := redisstore.New(rdb)
	if err != nil {
		f.Fatal(err)
	}
	storagetest.Fuzz(f, s, 0)
}
