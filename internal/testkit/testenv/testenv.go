// Package testenv gives tests their backends: a real Redis and PostgreSQL
// named by environment variables, or an embedded miniredis.
//
// Without the variables a test that needs a real server skips and says which
// variable to set, so `go test ./...` passes on a bare machine. Under CI
// (CI=true) a missing variable fails the test instead: in CI nothing may skip.
//
// Each such skip is counted, and a package whose TestMain runs its tests
// through [Run] or [Wrap] ends with one line saying how many of its tests
// skipped and which variables enable them (see [Run] for where it goes).
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

const (
	// RedisAddrVar names the variable holding a real Redis's host:port.
	RedisAddrVar = "REDFENCE_REDIS_ADDR"
	// PostgresURLVar names the variable holding a PostgreSQL URL.
	PostgresURLVar = "REDFENCE_POSTGRES_URL"
	// MySQLDSNVar names the variable holding a MySQL or MariaDB DSN for
	// github.com/go-sql-driver/mysql.
	MySQLDSNVar = "REDFENCE_MYSQL_DSN"
	// RedisNoFunctionsAddrVar names the variable holding the host:port of a
	// real Redis without Functions (FUNCTION, FCALL and FCALL_RO renamed
	// away), on which [EachRedis] runs every body a third time: the
	// scripts' EVALSHA fallback on a real server, which miniredis alone
	// would leave to an embedded imitation.
	RedisNoFunctionsAddrVar = "REDFENCE_REDIS_NOFUNCTIONS_ADDR"
)

// need returns the value of the variable, or skips (fails under CI).
func need(t testing.TB, name, what string) string {
	t.Helper()
	v := os.Getenv(name)
	if v != "" {
		return v
	}
	Missing(t, name,
		fmt.Sprintf("%s is not set: CI must run every %s test", name, what),
		fmt.Sprintf("skipping %s test: set %s to run it", what, name))
	return ""
}

// Missing ends t for want of what the variable name would provide (a
// server's address, a binary's path): under CI (CI=true) it fails t with
// fail, otherwise it skips t with skip and counts the skip against name for
// the package's summary line (see [Run]).
func Missing(t testing.TB, name, fail, skip string) {
	t.Helper()
	skips.missing(t, name, fail, skip)
}

// RedisAddr returns the real Redis's address, or skips.
func RedisAddr(t testing.TB) string { return need(t, RedisAddrVar, "real-Redis") }

// PostgresURL returns the PostgreSQL URL, or skips.
func PostgresURL(t testing.TB) string { return need(t, PostgresURLVar, "PostgreSQL") }

// MySQLDSN returns the MySQL or MariaDB DSN, or skips.
func MySQLDSN(t testing.TB) string { return need(t, MySQLDSNVar, "MySQL") }

// S3EndpointVar names the URL of a running S3 API server (versitygw in
// CI), whose credentials are in $REDFENCE_S3_ACCESS_KEY and
// $REDFENCE_S3_SECRET_KEY.
const S3EndpointVar = "REDFENCE_S3_ENDPOINT"

// S3Endpoint returns the S3 API server's URL, or skips.
func S3Endpoint(t testing.TB) string { return need(t, S3EndpointVar, "S3") }

// Redis returns a client of the real Redis, closed when the test ends.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: RedisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("%s=%s: %v", RedisAddrVar, os.Getenv(RedisAddrVar), err)
	}
	return c
}

// Mini starts a miniredis and returns it with a client of it, both closed
// when the test ends. Its keys expire as the wall clock passes, as a real
// Redis's do (a lock's lease is its key's expiry): miniredis expires keys
// only when told to, so a goroutine moves its expiry clock on every few
// milliseconds. Advance moves it further.
func Mini(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	})
	t.Cleanup(func() {
		close(done)
		wg.Wait()
		_ = c.Close()
	})
	return m, c
}

// Unique returns a name no other test or run uses: the test's name with a
// random suffix, so tests sharing one real Redis never see each other's keys.
func Unique(t testing.TB) string {
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return name + "-" + randomHex(6)
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Backend is a Redis a test body runs against.
type Backend struct {
	Name   string
	Client *redis.Client
	// Mini is the embedded server, nil for a real Redis.
	Mini *miniredis.Miniredis
}

// EachRedis runs body as a subtest against miniredis and, when
// REDFENCE_REDIS_ADDR is set (always under CI), against the real Redis,
// which has Functions (the scripts go as FCALL); and, when
// REDFENCE_REDIS_NOFUNCTIONS_ADDR is set (always under CI), against a real
// Redis without them (the scripts go as EVALSHA, the fallback path).
func EachRedis(t *testing.T, body func(t *testing.T, b Backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		m, c := Mini(t)
		body(t, Backend{Name: "miniredis", Client: c, Mini: m})
	})
	t.Run("redis", func(t *testing.T) {
		body(t, Backend{Name: "redis", Client: Redis(t)})
	})
	t.Run("redis-evalsha", func(t *testing.T) {
		body(t, Backend{Name: "redis-evalsha", Client: RedisNoFunctions(t)})
	})
}

// RedisNoFunctions returns a client of the real Redis without Functions
// (REDFENCE_REDIS_NOFUNCTIONS_ADDR), closed when the test ends, or skips
// (fails under CI). It fails the test when that server answers FUNCTION
// LIST: a server with Functions there would run the FCALL path twice and
// the fallback never.
func RedisNoFunctions(t testing.TB) *redis.Client {
	t.Helper()
	addr := need(t, RedisNoFunctionsAddrVar, "real-Redis-without-Functions")
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("%s=%s: %v", RedisNoFunctionsAddrVar, addr, err)
	}
	err := c.FunctionList(t.Context(), redis.FunctionListQuery{}).Err()
	if err != nil && !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("%s=%s: FUNCTION LIST: %v", RedisNoFunctionsAddrVar, addr, err)
	}
	if err == nil {
		t.Fatalf("%s=%s answers FUNCTION LIST: start it with --rename-command FUNCTION \"\" --rename-command FCALL \"\" --rename-command FCALL_RO \"\"",
			RedisNoFunctionsAddrVar, addr)
	}
	return c
}

// Expire makes d pass for key expiry and for the leases the scripts time
// with TIME: miniredis's clock moves on (see Advance), a real Redis is
// waited for (keep d short there).
func (b Backend) Expire(d time.Duration) {
	if b.Mini != nil {
		Advance(b.Mini, d)
		return
	}
	time.Sleep(d)
}

// Advance moves miniredis's clock d on, for key expiry (FastForward) and for
// TIME, which it then pins: TIME stands still until the next Advance or
// SetTime.
func Advance(m *miniredis.Miniredis, d time.Duration) {
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		panic("testenv: miniredis TIME: " + err.Error())
	}
	m.SetTime(now.Add(d))
	m.FastForward(d)
}

// Snapshot returns a printable copy of key's type and contents, with its
// TTL left out, for checking that something left a key as it was ("none"
// for a missing key). DUMP would do on Redis, but miniredis dumps only
// strings. Types other than string, list, set, hash and zset fail t.
func Snapshot(t testing.TB, rdb redis.Cmdable, key string) string {
	t.Helper()
	ctx := context.Background()
	kind, err := rdb.Type(ctx, key).Result()
	if err != nil {
		t.Fatalf("snapshot of %q: %v", key, err)
	}
	var content any
	switch kind {
	case "none":
		return kind
	case "string":
		content = rdb.Get(ctx, key).Val()
	case "list":
		content = rdb.LRange(ctx, key, 0, -1).Val()
	case "set":
		content = rdb.SMembers(ctx, key).Val()
		slices.Sort(content.([]string))
	case "hash":
		content = rdb.HGetAll(ctx, key).Val()
	case "zset":
		content = rdb.ZRangeWithScores(ctx, key, 0, -1).Val()
	default:
		t.Fatalf("snapshot of %s key %q not supported", kind, key)
	}
	return fmt.Sprintf("%s %v", kind, content)
}

// ScriptCall reports whether a command named name runs one of the lock
// scripts: FCALL or FCALL_RO of the library, or EVALSHA or EVAL where the
// server has no Functions (miniredis, Redis before 7).
func ScriptCall(name string) bool {
	switch strings.ToLower(name) {
	case "fcall", "fcall_ro", "evalsha", "eval":
		return true
	}
	return false
}

// Libraries lists the redfence Functions libraries loaded on one server.
func Libraries(t testing.TB, rdb *redis.Client) []string {
	t.Helper()
	libs, err := rdb.FunctionList(context.Background(), redis.FunctionListQuery{LibraryNamePattern: "redfence_*"}).Result()
	if err != nil {
		t.Fatalf("FUNCTION LIST: %v", err)
	}
	var names []string
	for _, l := range libs {
		names = append(names, l.Name)
	}
	return names
}
