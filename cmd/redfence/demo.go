package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	_ "github.com/go-sql-driver/mysql" // MySQL and MariaDB driver for --store mysql
	_ "github.com/jackc/pgx/v5/stdlib" // PostgreSQL driver for --store postgres
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // pure-Go SQLite driver for --store sqlite

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/fence/fencehttp"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
	"github.com/redfence/redfence/storage/redisstore"
	"github.com/redfence/redfence/storage/sqlstore"
)

// The demo's timing: A's lease, and how long A is frozen. The pause must
// outlast the lease, which is the whole point.
const (
	leaseTTL = time.Second
	pause    = 1500 * time.Millisecond
)

const demoDoc = `Plays Kleppmann's pause scenario: worker A takes a lock and writes, then
is paused past its lease; worker B takes the lock with a higher fencing token
and writes; A wakes up and writes with its old token, and the fenced store
refuses that write. The demo checks every step and fails (exit status 3) if
fencing did not hold. With no flags it needs nothing installed: it runs on an
embedded Redis (miniredis) and an in-memory store. With --http the workers
write through a fenced HTTP service on loopback that owns the store: their
tokens travel in a Fencing-Token header, and A's late request is refused with
409 Conflict (package fence/fencehttp). With --rw it plays the story on a
fenced read-write lock (reentrant.RWMutex): writer A, paused past its write
lease, has its late write refused once writer B wrote with a higher token;
reader R, whose read lease's token is its epoch (B's token), reads B's
record with storage.GetAt, is paused past its lease while writer C writes,
and has its late read refused.`

// demoStores are the --store values.
var demoStores = []string{"memory", "redis", "postgres", "sqlite", "mysql", "s3"}

type demoConfig struct {
	redisAddr   string
	prefix      string
	store       string
	postgresURL string
	mysqlDSN    string
	s3Endpoint  string
	s3Bucket    string
	redlock     bool
	http        bool
	rw          bool
}

func demoFlags(cfg *demoConfig) *flag.FlagSet {
	fs := newFlagSet("demo")
	fs.StringVar(&cfg.redisAddr, "redis", "", "run on the Redis server at `host:port` (default: an embedded miniredis)")
	fs.StringVar(&cfg.prefix, "prefix", scripts.DefaultPrefix,
		"key prefix `P`: the locks live at P:{NAME},\nthe redis store's records at P:store:{KEY}:rec")
	fs.StringVar(&cfg.store, "store", "memory", "the fenced `STORE`: "+strings.Join(demoStores, ", "))
	fs.BoolVar(&cfg.redlock, "redlock", false, "lock on a Redlock of three embedded servers (miniredis) instead of one")
	fs.BoolVar(&cfg.rw, "rw", false, "play the story on a read-write lock: a paused writer's late write\nand a paused reader's late fenced read (storage.GetAt) refused")
	fs.BoolVar(&cfg.http, "http", false, "write through a fenced HTTP service on loopback (fencehttp) that owns the store,\nthe token travelling in a "+fencehttp.Header+" header")
	fs.StringVar(&cfg.postgresURL, "postgres", "",
		"PostgreSQL `URL` for --store postgres (default: $"+postgresURLVar+")")
	fs.StringVar(&cfg.mysqlDSN, "mysql", "",
		"MySQL or MariaDB `DSN` for --store mysql, as github.com/go-sql-driver/mysql\nreads it, such as root@tcp(127.0.0.1:3306)/test (default: $"+mysqlDSNVar+")")
	fs.StringVar(&cfg.s3Endpoint, "s3-endpoint", "",
		"S3 API `URL` for --store s3, such as http://127.0.0.1:7070 (default: $"+s3EndpointVar+");\ncredentials from $"+s3AccessVar+" and $"+s3SecretVar+" (or $AWS_ACCESS_KEY_ID and\n$AWS_SECRET_ACCESS_KEY), region from $AWS_REGION (default us-east-1)")
	fs.StringVar(&cfg.s3Bucket, "s3-bucket", "redfence-demo", "the `BUCKET` for --store s3, made when missing")
	return fs
}

// The variables --postgres and --mysql default to.
const (
	postgresURLVar = "REDFENCE_POSTGRES_URL"
	mysqlDSNVar    = "REDFENCE_MYSQL_DSN"
)

// demo runs the demo command.
func demo(ctx context.Context, c *command, args []string, stdout io.Writer) error {
	var cfg demoConfig
	pos, help, err := parseArgs(c, demoFlags(&cfg), args, stdout)
	if help || err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("demo", "demo takes no arguments, got %q", pos)
	}
	if cfg.postgresURL == "" {
		cfg.postgresURL = os.Getenv(postgresURLVar)
	}
	if cfg.mysqlDSN == "" {
		cfg.mysqlDSN = os.Getenv(mysqlDSNVar)
	}
	if cfg.s3Endpoint == "" {
		cfg.s3Endpoint = os.Getenv(s3EndpointVar)
	}
	if err := cfg.check(); err != nil {
		return err
	}

	rdb, where, stopRedis, err := demoRedis(ctx, cfg.redisAddr)
	if err != nil {
		return err
	}
	defer stopRedis()
	newLock := func(opts ...reentrant.ClientOption) (*reentrant.Client, error) { return reentrant.New(rdb, opts...) }
	if cfg.redlock {
		nodes, stopNodes, err := demoRedlock(ctx)
		if err != nil {
			return err
		}
		defer stopNodes()
		where = "a Redlock of three embedded Redis servers (miniredis)"
		newLock = func(opts ...reentrant.ClientOption) (*reentrant.Client, error) {
			return reentrant.NewRedlock(nodes, opts...)
		}
	}
	store, storeName, closeStore, err := demoStore(ctx, cfg, rdb)
	if err != nil {
		return err
	}
	defer closeStore()
	if cfg.rw {
		return playRW(ctx, stdout, newLock, cfg.prefix, store, where, storeName)
	}
	return playPause(ctx, stdout, newLock, cfg.prefix, store, cfg.http, where, storeName)
}

// check reports a usage error in cfg before anything is connected.
func (cfg demoConfig) check() error {
	if cfg.redlock && cfg.redisAddr != "" {
		return usagef("demo", "--redlock runs on embedded servers: it takes no --redis")
	}
	if cfg.rw && cfg.redlock {
		return usagef("demo", "--rw needs one Redis: read-write locks are not supported on a Redlock yet")
	}
	if cfg.rw && cfg.http {
		return usagef("demo", "--rw writes and reads the store directly: it takes no --http")
	}
	if cfg.redisAddr != "" {
		if err := checkAddr("demo", cfg.redisAddr); err != nil {
			return err
		}
	}
	if err := checkPrefix("demo", cfg.prefix); err != nil {
		return err
	}
	if !slices.Contains(demoStores, cfg.store) {
		return usagef("demo", "unknown --store %q: want %s", cfg.store, strings.Join(demoStores, ", "))
	}
	if cfg.store == "postgres" && cfg.postgresURL == "" {
		return usagef("demo", "--store postgres needs --postgres URL or $%s", postgresURLVar)
	}
	if cfg.store == "mysql" && cfg.mysqlDSN == "" {
		return usagef("demo", "--store mysql needs --mysql DSN or $%s", mysqlDSNVar)
	}
	if cfg.store == "s3" && cfg.s3Endpoint == "" {
		return usagef("demo", "--store s3 needs --s3-endpoint URL or $%s", s3EndpointVar)
	}
	return nil
}

// demoRedis connects to addr, or starts a miniredis whose clock follows the
// wall clock so that TTLs run out as they would on a real server.
func demoRedis(ctx context.Context, addr string) (*redis.Client, string, func(), error) {
	if addr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		if err := rdb.Ping(ctx).Err(); err != nil {
			_ = rdb.Close()
			return nil, "", nil, fmt.Errorf("redis %s: %w", addr, err)
		}
		return rdb, "Redis at " + addr, func() { _ = rdb.Close() }, nil
	}
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, "", nil, fmt.Errorf("embedded redis: %w", err)
	}
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
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return rdb, "embedded Redis (miniredis)", func() {
		_ = rdb.Close()
		close(done)
		wg.Wait()
		m.Close()
	}, nil
}

func demoStore(ctx context.Context, cfg demoConfig, rdb *redis.Client) (storage.Store, string, func(), error) {
	switch cfg.store {
	case "memory":
		return memory.New(), "in-memory store", func() {}, nil
	case "redis":
		s, err := redisstore.New(rdb, redisstore.WithPrefix(cfg.prefix+":store"))
		return s, "Redis store", func() {}, err
	case "postgres":
		return sqlDemoStore(ctx, "pgx", cfg.postgresURL, sqlstore.Postgres, "PostgreSQL store", func() {})
	case "mysql":
		return sqlDemoStore(ctx, "mysql", cfg.mysqlDSN, sqlstore.MySQL, "MySQL store", func() {})
	case "sqlite":
		dir, err := os.MkdirTemp("", "redfence-demo-")
		if err != nil {
			return nil, "", nil, err
		}
		path := filepath.Join(dir, "demo.db")
		return sqlDemoStore(ctx, "sqlite", sqlstore.SQLiteDSN(path), sqlstore.SQLite, "SQLite store ("+path+")",
			func() { _ = os.RemoveAll(dir) })
	case "s3":
		return s3DemoStore(ctx, cfg)
	}
	return nil, "", nil, fmt.Errorf("unknown store %q", cfg.store) // cfg.check prevents it
}

func sqlDemoStore(ctx context.Context, driver, dsn string, d sqlstore.Dialect, name string, cleanup func()) (storage.Store, string, func(), error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		cleanup()
		return nil, "", nil, err
	}
	closeAll := func() { _ = db.Close(); cleanup() }
	s, err := sqlstore.New(db, d)
	if err == nil {
		err = s.Migrate(ctx)
	}
	if err != nil {
		closeAll()
		return nil, "", nil, fmt.Errorf("%s: %w", name, err)
	}
	return s, name, closeAll, nil
}

// timeline prints events with the time since the demo started.
type timeline struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func (tl *timeline) say(who, format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	fmt.Fprintf(tl.w, "%6dms  %-2s %s\n", time.Since(tl.start).Milliseconds(), who, fmt.Sprintf(format, args...))
}

// playPause runs the scenario and returns an error if any step does not
// turn out as fencing promises, so the demo doubles as a smoke test.
func playPause(ctx context.Context, w io.Writer, newLock func(...reentrant.ClientOption) (*reentrant.Client, error), prefix string, store storage.Store, viaHTTP bool, where, storeName string) error {
	var b [3]byte
	_, _ = rand.Read(b[:])
	name := "invoice-" + hex.EncodeToString(b[:])
	resource := "invoices/" + name
	var out demoWriter = storeWriter{store, resource}
	if viaHTTP {
		hw, stop, err := startHTTP(store, name, resource)
		if err != nil {
			return err
		}
		defer stop()
		out = hw
	}

	// A real GC pause or SIGSTOP freezes the renewal goroutine too, so A's
	// client does not renew: its lease simply runs out while it is frozen.
	clientA, err := newLock(reentrant.WithPrefix(prefix), reentrant.WithTTL(leaseTTL), reentrant.WithoutRenewal())
	if err != nil {
		return err
	}
	defer clientA.Close()
	clientB, err := newLock(reentrant.WithPrefix(prefix), reentrant.WithTTL(leaseTTL))
	if err != nil {
		return err
	}
	defer clientB.Close()

	fmt.Fprintf(w, "redfence demo: lock %q (key prefix %q) on %s, writes to %s%s\n", name, prefix, where, storeName, out.describe())
	fmt.Fprintf(w, "A's lease is %v; A will be paused for %v.\n\n", leaseTTL, pause)
	tl := &timeline{w: w, start: time.Now()}

	outer, err := clientA.Lock(ctx, name)
	if err != nil {
		return err
	}
	tokA := outer.Token()
	tl.say("A", "acquired %s: token %d, depth %d", name, tokA, outer.Depth())
	inner, err := clientA.Lock(outer.Context(), name)
	if err != nil {
		return err
	}
	tl.say("A", "reentered from a nested section: token %d (same), depth %d", inner.Token(), inner.Depth())
	if err := out.put(inner.Context(), "draft by A", inner.Token()); err != nil {
		return fmt.Errorf("A's first write: %w", err)
	}
	tl.say("A", "wrote %q with token %d: accepted", "draft by A", inner.Token())
	if err := inner.Unlock(ctx); err != nil {
		return err
	}
	tl.say("A", "left the nested section: depth 1, still holding the lock")

	type result struct {
		token fence.Token
		err   error
	}
	bDone := make(chan result, 1)
	go func() {
		tl.say("B", "wants %s; waits (A holds it)", name)
		err := clientB.Do(ctx, name, func(ctx context.Context, tok fence.Token) error {
			tl.say("B", "acquired %s: token %d (A's lease ran out)", name, tok)
			if err := out.put(ctx, "final by B", tok); err != nil {
				return err
			}
			tl.say("B", "wrote %q with token %d: accepted; unlocking", "final by B", tok)
			bDone <- result{token: tok}
			return nil
		})
		if err != nil {
			bDone <- result{err: err}
		}
	}()

	tl.say("A", "is paused (a stop-the-world GC, a page fault, SIGSTOP) for %v...", pause)
	select {
	case <-time.After(pause):
	case <-ctx.Done():
		return ctx.Err()
	}
	tl.say("A", "resumes; it still believes it holds the lock")

	var rb result
	select {
	case rb = <-bDone:
	case <-time.After(10 * time.Second):
		return errors.New("B never acquired the lock")
	}
	if rb.err != nil {
		return fmt.Errorf("B: %w", rb.err)
	}

	// A's context still carries its token (a request on its way when A
	// froze), though its lease ended: only the store can refuse it.
	err = out.put(context.WithoutCancel(outer.Context()), "late by A", tokA)
	switch {
	case isStale(err):
		tl.say("A", "wrote %q with token %d: REFUSED (%v)", "late by A", tokA, err)
	case err == nil:
		return unsafef("the store ACCEPTED A's late write with token %d after B wrote with %d", tokA, rb.token)
	default:
		return fmt.Errorf("A's late write: %w", err)
	}
	err = outer.Unlock(ctx)
	switch {
	case err == nil:
		return unsafef("A's unlock after losing the lease succeeded, want ErrNotHeld")
	case !errors.Is(err, reentrant.ErrNotHeld):
		return fmt.Errorf("A's unlock: %w", err)
	}
	tl.say("A", "unlock: %v", err)

	rec, err := out.get(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nThe store holds %q, written with token %d.\n", rec.Value, rec.Token)
	if string(rec.Value) != "final by B" || rec.Token != rb.token || rb.token <= tokA {
		return unsafef("the store holds %q with token %d, want B's write with token %d > %d", rec.Value, rec.Token, rb.token, tokA)
	}
	fmt.Fprintln(w, "Both workers believed they held the lock at once; the fencing token kept A's late write out.")
	return nil
}
