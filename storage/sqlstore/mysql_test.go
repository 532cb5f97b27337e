package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testkit/netfault"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/sqlstore"
	"github.com/redfence/redfence/storage/storagetest"
)

// mysqlIsolations are the isolation levels the MySQL store is tested
// under: MySQL's default and the one many deployments pick.
var mysqlIsolations = []string{"REPEATABLE-READ", "READ-COMMITTED"}

// mysqlConfig parses REDFENCE_MYSQL_DSN (or skips) and sets iso, when not
// empty, as every connection's isolation level.
func mysqlConfig(t *testing.T, iso string) *mysql.Config {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatalf("%s: %v", testenv.MySQLDSNVar, err)
	}
	if iso != "" {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		// MariaDB 10.x knows only tx_isolation, MySQL 8 only
		// transaction_isolation; the session statement works on both.
		cfg.Params["tx_isolation"] = "'" + iso + "'"
		if !mariaDB(t, cfg) {
			delete(cfg.Params, "tx_isolation")
			cfg.Params["transaction_isolation"] = "'" + iso + "'"
		}
	}
	return cfg
}

func init() {
	// The driver logs broken connections, which the fault tests make on
	// purpose; its errors reach the tests anyway.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
}

var (
	mariaOnce sync.Once
	isMaria   bool
)

// mariaDB reports whether the server of cfg is MariaDB.
func mariaDB(t *testing.T, cfg *mysql.Config) bool {
	mariaOnce.Do(func() {
		plain := cfg.Clone()
		plain.Params = nil
		db := openMySQLConfig(t, plain)
		var v string
		if err := db.QueryRowContext(t.Context(), "SELECT VERSION()").Scan(&v); err != nil {
			t.Fatal(err)
		}
		isMaria = strings.Contains(strings.ToLower(v), "mariadb")
	})
	return isMaria
}

func openMySQLConfig(t *testing.T, cfg *mysql.Config) *sql.DB {
	t.Helper()
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { _ = db.Close() })
	if err := db.PingContext(t.Context()); err != nil {
		t.Fatalf("%s: %v", testenv.MySQLDSNVar, err)
	}
	return db
}

// openMySQL opens the MySQL of REDFENCE_MYSQL_DSN (or skips) with every
// connection at isolation iso ("" for the server's default).
func openMySQL(t *testing.T, iso string) *sql.DB {
	t.Helper()
	return openMySQLConfig(t, mysqlConfig(t, iso))
}

// newMySQLStore makes a store on a fresh table, dropped when the test ends.
func newMySQLStore(t *testing.T, db *sql.DB) (*sqlstore.Store, string) {
	t.Helper()
	table := testenv.SQLTable(t, "mysql", testenv.MySQLDSN(t), "test")
	return mustNew(t, db, sqlstore.MySQL, table), table
}

func TestConformanceMySQL(t *testing.T) {
	testenv.MySQLDSN(t)
	for _, iso := range mysqlIsolations {
		t.Run(iso, func(t *testing.T) {
			storagetest.Run(t, func(t *testing.T) storage.Store {
				s, _ := newMySQLStore(t, openMySQL(t, iso))
				return s
			}, append(sqlOptions, storagetest.WithFault(func(t *testing.T) storagetest.Fault {
				// The server becomes unreachable mid-call: a proxy in
				// front of it resets every connection and refuses new ones.
				direct := openMySQL(t, iso)
				_, table := newMySQLStore(t, direct)
				proxied, proxy := openMySQLProxied(t, iso)
				return storagetest.Fault{
					Store: mustNew(t, proxied, sqlstore.MySQL, table),
					Break: func() {
						proxy.RefuseNew(true)
						proxy.ResetAll()
					},
					Reopen: func(t *testing.T) storage.Store { return mustNew(t, direct, sqlstore.MySQL, table) },
				}
			}))...)
		})
	}
}

// openMySQLProxied opens the MySQL server through a fault-injection proxy.
func openMySQLProxied(t *testing.T, iso string) (*sql.DB, *netfault.Proxy) {
	t.Helper()
	cfg := mysqlConfig(t, iso)
	proxy, err := netfault.New(cfg.Addr)
	if err != nil {
		t.Fatalf("cannot proxy %s: %v", cfg.Addr, err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	cfg.Addr = proxy.Addr()
	return openMySQLConfig(t, cfg), proxy
}

// TestContentionMySQL: 16 writers, each on its own connection, make Puts
// and Guards with random tokens on one key, under each isolation level. A
// trigger logs every accepted write in commit order (the row lock is held
// while the log row is inserted): tokens must strictly increase along it,
// it must hold exactly the writes reported accepted, and the final highest
// must be the highest accepted.
func TestContentionMySQL(t *testing.T) {
	testenv.MySQLDSN(t)
	const writers, writes = 16, 60
	for _, iso := range mysqlIsolations {
		t.Run(iso, func(t *testing.T) {
			setup := openMySQL(t, iso)
			_, table := newMySQLStore(t, setup)
			log := testenv.SQLTable(t, "mysql", testenv.MySQLDSN(t), "log")
			mustExec(t, setup,
				"CREATE TABLE `"+log+"` (seq BIGINT AUTO_INCREMENT PRIMARY KEY, token BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB",
				"CREATE TRIGGER `"+log+"_i` AFTER INSERT ON `"+table+"` FOR EACH ROW INSERT INTO `"+log+"` (token) VALUES (NEW.`highest`)",
				"CREATE TRIGGER `"+log+"_u` AFTER UPDATE ON `"+table+"` FOR EACH ROW BEGIN IF NEW.`highest` <> OLD.`highest` THEN INSERT INTO `"+log+"` (token) VALUES (NEW.`highest`); END IF; END",
			)
			// Unique tokens (equal tokens would both be accepted and log
			// nothing the second time), rising round by round and shuffled
			// among the writers within a round, so that writers race for
			// every round's highest and many writes are accepted.
			tokens := make([]int, writers*writes)
			for i := range writes {
				for w, p := range rand.Perm(writers) {
					tokens[w*writes+i] = i*writers + p
				}
			}
			var (
				mu       sync.Mutex
				accepted = map[fence.Token]bool{}
				highest  fence.Token
				wg       sync.WaitGroup
			)
			start := time.Now()
			for w := range writers {
				db := openMySQL(t, iso)
				db.SetMaxOpenConns(1)
				s := mustNew(t, db, sqlstore.MySQL, table)
				wg.Go(func() {
					for i := range writes {
						tok := fence.Token(tokens[w*writes+i] + 1)
						var err error
						if i%2 == 0 {
							err = s.Put(t.Context(), "k", []byte(tok.String()), tok)
						} else {
							err = guardOnce(t.Context(), db, s, tok)
						}
						switch {
						case err == nil:
							mu.Lock()
							accepted[tok] = true
							highest = max(highest, tok)
							mu.Unlock()
						case !errors.Is(err, fence.ErrStale):
							t.Errorf("writer %d, token %d: %v", w, tok, err)
							return
						}
					}
				})
			}
			wg.Wait()
			rows, err := setup.QueryContext(t.Context(), "SELECT token FROM `"+log+"` ORDER BY seq")
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var prev fence.Token
			n := 0
			for rows.Next() {
				var tok uint64
				if err := rows.Scan(&tok); err != nil {
					t.Fatal(err)
				}
				if fence.Token(tok) <= prev {
					t.Errorf("commit order: token %d committed after %d: a stale write got in", tok, prev)
				}
				if !accepted[fence.Token(tok)] {
					t.Errorf("token %d committed but reported refused", tok)
				}
				prev = fence.Token(tok)
				n++
			}
			if n != len(accepted) {
				t.Errorf("%d writes committed, %d reported accepted: some were lost", n, len(accepted))
			}
			check := mustNew(t, setup, sqlstore.MySQL, table)
			if h, err := check.Highest(t.Context(), "k"); err != nil || h != highest {
				t.Errorf("final highest %d (%v); want the highest accepted, %d", h, err, highest)
			}
			t.Logf("mysql %s: %d writers x %d Put/Guard: %d accepted, %d refused, in %v",
				iso, writers, writes, len(accepted), writers*writes-len(accepted), time.Since(start).Round(time.Millisecond))
		})
	}
}

// guardOnce guards key "k" with tok in a transaction of its own and commits.
func guardOnce(ctx context.Context, db *sql.DB, s *sqlstore.Store, tok fence.Token) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := s.Guard(ctx, tx, "k", tok); err != nil {
		return err
	}
	return tx.Commit()
}

func TestGuardAccountsMySQL(t *testing.T) {
	db := openMySQL(t, "")
	fences, _ := newMySQLStore(t, db)
	accounts := testenv.SQLTable(t, "mysql", testenv.MySQLDSN(t), "accounts")
	accountsScenario(t, newBank(t, db, fences, accounts))
}

func TestGuardRefusedCannotCommitMySQL(t *testing.T) {
	for _, iso := range mysqlIsolations {
		t.Run(iso, func(t *testing.T) {
			db := openMySQL(t, iso)
			db.SetMaxOpenConns(1)
			fences, _ := newMySQLStore(t, db)
			notes := testenv.SQLTable(t, "mysql", testenv.MySQLDSN(t), "notes")
			refusedGuard(t, db, openMySQL(t, iso), fences, notes)
		})
	}
}

// A connection killed (KILL CONNECTION) while its Put waits for a row lock:
// the Put fails saying nothing was written, and nothing was.
func TestKilledConnectionMySQL(t *testing.T) {
	ctx := t.Context()
	db := openMySQL(t, "")
	s, table := newMySQLStore(t, db)
	if err := s.Put(ctx, "k", []byte("v1"), 1); err != nil {
		t.Fatal(err)
	}
	// Another transaction holds the row: the Put below waits for it.
	blocker, err := openMySQL(t, "").BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback()
	if err := s.Guard(ctx, blocker, "k", 1); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Put(ctx, "k", []byte("v2"), 2) }()
	admin := openMySQL(t, "")
	var id int64
	seen := testenv.Await(time.Minute, func() bool {
		err := admin.QueryRowContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE ?",
			"INSERT INTO `"+table+"`%").Scan(&id)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		return id != 0
	})
	if !seen {
		t.Fatal("the Put never showed up waiting in the process list")
	}
	if _, err := admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
		t.Fatal(err)
	}
	var putErr error
	select {
	case putErr = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the Put on a killed connection never returned")
	}
	if putErr == nil || errors.Is(putErr, fence.ErrStale) {
		t.Fatalf("Put on a killed connection: %v; want the connection's error", putErr)
	}
	if !strings.Contains(putErr.Error(), "nothing was written") && !strings.Contains(putErr.Error(), "applied whole or not at all") {
		t.Errorf("the error must say what became of the write: %v", putErr)
	}
	if err := blocker.Rollback(); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Highest(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	applied := rec.Token == 2 && string(rec.Value) == "v2" && h == 2
	untouched := rec.Token == 1 && string(rec.Value) == "v1" && h == 1
	if !applied && !untouched {
		t.Fatalf("after the kill: value %q token %d highest %d: applied in part", rec.Value, rec.Token, h)
	}
	if strings.Contains(putErr.Error(), "nothing was written") && !untouched {
		t.Fatalf("the error says nothing was written, yet the row reads %q token %d highest %d", rec.Value, rec.Token, h)
	}
	t.Logf("killed mid-transaction: %v; applied=%v", putErr, applied)
}

// New refuses settings that would make the store wrong, and bad input is
// refused with typed errors before anything is written.
func TestMySQLRefusals(t *testing.T) {
	ctx := t.Context()
	for _, bad := range []struct{ param, value, want string }{
		{"autocommit", "0", "autocommit"},
		{"tx_isolation", "'READ-UNCOMMITTED'", "READ UNCOMMITTED"},
	} {
		cfg := mysqlConfig(t, "")
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		param := bad.param
		if param == "tx_isolation" && !mariaDB(t, cfg) {
			param = "transaction_isolation"
		}
		cfg.Params[param] = bad.value
		_, err := sqlstore.New(openMySQLConfig(t, cfg), sqlstore.MySQL)
		if !errors.Is(err, storage.ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("New with %s=%s: %v; want ErrInvalid naming %s", param, bad.value, err, bad.want)
		}
	}

	db := openMySQL(t, "")
	s, table := newMySQLStore(t, db)
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"oversize key", s.Put(ctx, strings.Repeat("k", storage.MaxKeyLen+1), []byte("v"), 1), storage.ErrInvalid},
		{"zero token", s.Put(ctx, "k", []byte("v"), fence.None), fence.ErrNoToken},
		{"token above MaxToken", s.Put(ctx, "k", []byte("v"), sqlstore.MaxToken+1), storage.ErrInvalid},
		{"guard with a zero token", func() error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			return s.Guard(ctx, tx, "k", fence.None)
		}(), fence.ErrNoToken},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v; want %v", c.name, c.err, c.want)
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+table+"`").Scan(&n); err != nil || n != 0 {
		t.Errorf("%d rows (%v) after refused writes; want none", n, err)
	}
	if _, err := sqlstore.New(db, sqlstore.MySQL, sqlstore.WithTable("x; DROP TABLE y")); !errors.Is(err, storage.ErrInvalid) {
		t.Errorf("a table name that is not an identifier: %v; want ErrInvalid", err)
	}
	// The largest key and token round-trip.
	long := strings.Repeat("\x00\xff", storage.MaxKeyLen/2)
	if err := s.Put(ctx, long, []byte("v"), sqlstore.MaxToken); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, long); err != nil || rec.Token != sqlstore.MaxToken {
		t.Fatalf("Get of the longest key: %+v, %v", rec, err)
	}
}

// A write of the store's own transaction that InnoDB picks as a deadlock
// victim (error 1213, SQLSTATE 40001: rolled back whole) is run again, five
// attempts in all; a Guard's, in the caller's transaction, is not. A
// trigger plants the deadlock error on the first @rf_fail attempts and
// counts attempts in a session variable, which a rollback does not undo;
// the pool holds one connection, so every attempt and the count share one
// session.
func TestDeadlockVictimRetriedMySQL(t *testing.T) {
	ctx := t.Context()
	db := openMySQL(t, "")
	db.SetMaxOpenConns(1)
	s, table := newMySQLStore(t, db)
	trigger := "CREATE TRIGGER `" + table + "_deadlock` BEFORE INSERT ON `" + table + "` FOR EACH ROW BEGIN " +
		"SET @rf_attempts = COALESCE(@rf_attempts, 0) + 1; " +
		"IF @rf_attempts <= @rf_fail THEN SIGNAL SQLSTATE '40001' " +
		"SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'Deadlock found when trying to get lock (planted by the test)'; END IF; END"
	if _, err := db.ExecContext(ctx, trigger); err != nil {
		t.Fatal(err)
	}
	// plant makes the next write's first fail attempts deadlock victims.
	plant := func(q interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
	}, fail int) {
		t.Helper()
		if _, err := q.ExecContext(ctx, "SET @rf_attempts = 0, @rf_fail = ?", fail); err != nil {
			t.Fatal(err)
		}
	}
	attempts := func(q interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}) int {
		t.Helper()
		var n int
		if err := q.QueryRowContext(ctx, "SELECT @rf_attempts").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	plant(db, 4)
	if err := s.Put(ctx, "k", []byte("v"), 1); err != nil {
		t.Fatalf("four deadlocks then success: %v", err)
	}
	if n := attempts(db); n != 5 {
		t.Errorf("four deadlocks then success took %d attempts, want 5", n)
	}
	rec, err := s.Get(ctx, "k")
	if err != nil || string(rec.Value) != "v" || rec.Token != 1 {
		t.Fatalf("after the fifth attempt: %q token %d, %v; want %q token 1", rec.Value, rec.Token, err, "v")
	}

	plant(db, 5)
	err = s.Put(ctx, "k", []byte("w"), 2)
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1213 || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("five deadlocks: %v; want the deadlock error, saying nothing was written", err)
	}
	if n := attempts(db); n != 5 {
		t.Errorf("five deadlocks took %d attempts, want 5", n)
	}
	if h, err := s.Highest(ctx, "k"); err != nil || h != 1 {
		t.Fatalf("after five deadlocks the highest is %d (%v), want 1: nothing written", h, err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	plant(tx, 1)
	if err := s.Guard(ctx, tx, "g", 1); !errors.As(err, &me) || me.Number != 1213 {
		t.Fatalf("a Guard whose statement is a deadlock victim: %v; want the deadlock error", err)
	}
	if n := attempts(db); n != 1 {
		t.Errorf("a Guard in the caller's transaction ran %d attempts, want 1: the caller's transaction is the caller's to retry", n)
	}
}
