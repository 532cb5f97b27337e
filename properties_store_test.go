package redfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
	"pgregory.net/rapid"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
	"github.com/redfence/redfence/storage/redisstore"
	"github.com/redfence/redfence/storage/sqlstore"
)

// storeMachine sends the same random writes and reads to an adapter and to
// the in-memory reference, and requires the same answer from both: the same
// error class, value and token for every call.
type storeMachine struct {
	got, ref storage.Store
	ns       string // a key namespace unique to this case
	keys     []string
}

func (sm *storeMachine) key(t *rapid.T) string {
	return sm.ns + rapid.SampledFrom(sm.keys).Draw(t, "key")
}

// token draws mostly small tokens, so that equal and lower tokens are common,
// and sometimes zero or huge ones.
func drawToken(t *rapid.T) fence.Token {
	return fence.Token(rapid.OneOf(
		rapid.Uint64Range(0, 12),
		rapid.Uint64Range(1<<62, 1<<62+3),
	).Draw(t, "token"))
}

func errClass(err error) string {
	for _, c := range []struct {
		err  error
		name string
	}{{fence.ErrStale, "stale"}, {fence.ErrNoToken, "no-token"}, {storage.ErrNotFound, "not-found"}, {storage.ErrInvalid, "invalid"}} {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	if err != nil {
		return "other: " + err.Error()
	}
	return "ok"
}

func (sm *storeMachine) same(t *rapid.T, op string, got, ref error) {
	if errClass(got) != errClass(ref) {
		t.Fatalf("%s: adapter says %v, reference says %v", op, got, ref)
	}
	var gs, rs *fence.StaleError
	if errors.As(got, &gs) && errors.As(ref, &rs) && (gs.Token != rs.Token || gs.Highest != rs.Highest) {
		t.Fatalf("%s: adapter's stale error %+v, reference's %+v", op, *gs, *rs)
	}
}

func (sm *storeMachine) put(t *rapid.T) {
	k, tok := sm.key(t), drawToken(t)
	v := rapid.SliceOfN(rapid.Byte(), 0, 64).Draw(t, "value")
	ctx := context.Background()
	sm.same(t, fmt.Sprintf("Put(%q, %d)", k, tok), sm.got.Put(ctx, k, v, tok), sm.ref.Put(ctx, k, v, tok))
}

func (sm *storeMachine) del(t *rapid.T) {
	k, tok := sm.key(t), drawToken(t)
	ctx := context.Background()
	sm.same(t, fmt.Sprintf("Delete(%q, %d)", k, tok), sm.got.Delete(ctx, k, tok), sm.ref.Delete(ctx, k, tok))
}

func (sm *storeMachine) get(t *rapid.T) {
	k := sm.key(t)
	ctx := context.Background()
	g, gerr := sm.got.Get(ctx, k)
	r, rerr := sm.ref.Get(ctx, k)
	sm.same(t, fmt.Sprintf("Get(%q)", k), gerr, rerr)
	if gerr == nil && (string(g.Value) != string(r.Value) || g.Token != r.Token) {
		t.Fatalf("Get(%q): adapter %q@%d, reference %q@%d", k, g.Value, g.Token, r.Value, r.Token)
	}
}

func (sm *storeMachine) highest(t *rapid.T) {
	k := sm.key(t)
	ctx := context.Background()
	g, gerr := sm.got.Highest(ctx, k)
	r, rerr := sm.ref.Highest(ctx, k)
	sm.same(t, fmt.Sprintf("Highest(%q)", k), gerr, rerr)
	if g != r {
		t.Fatalf("Highest(%q): adapter %d, reference %d", k, g, r)
	}
}

// storeMachineBody runs one case against the adapter s. Keys include bytes
// that need escaping in Redis tags and cannot live in PostgreSQL text.
func storeMachineBody(s storage.Store) func(*rapid.T) {
	n := 0
	return func(t *rapid.T) {
		n++
		sm := &storeMachine{got: s, ref: memory.New(), ns: fmt.Sprintf("%d/", n),
			keys: []string{"a", "b", "{c}", "d\x00e", "%7B"}}
		t.Repeat(map[string]func(*rapid.T){
			"put":     sm.put,
			"delete":  sm.del,
			"get":     sm.get,
			"highest": sm.highest,
		})
	}
}

func TestStoreProperties(t *testing.T) {
	t.Run("redisstore/miniredis", func(t *testing.T) {
		_, rdb := testenv.Mini(t)
		s, err := redisstore.New(rdb, redisstore.WithPrefix("rfprop"))
		require.NoError(t, err)
		withChecks(t, 4, func() { rapid.Check(t, storeMachineBody(s)) })
	})
	t.Run("redisstore/redis", func(t *testing.T) {
		s, err := redisstore.New(testenv.Redis(t), redisstore.WithPrefix("rfprop:"+testenv.Unique(t)))
		require.NoError(t, err)
		withChecks(t, 2, func() { rapid.Check(t, storeMachineBody(s)) })
	})
	t.Run("sqlstore/sqlite", func(t *testing.T) {
		s := sqlStore(t, "sqlite", sqlstore.SQLiteDSN(filepath.Join(t.TempDir(), "prop.db")), sqlstore.SQLite)
		withChecks(t, 2, func() { rapid.Check(t, storeMachineBody(s)) })
	})
	t.Run("sqlstore/postgres", func(t *testing.T) {
		s := sqlStore(t, "pgx", testenv.PostgresURL(t), sqlstore.Postgres)
		withChecks(t, 2, func() { rapid.Check(t, storeMachineBody(s)) })
	})
	t.Run("sqlstore/mysql", func(t *testing.T) {
		s := sqlStore(t, "mysql", testenv.MySQLDSN(t), sqlstore.MySQL)
		withChecks(t, 2, func() { rapid.Check(t, storeMachineBody(s)) })
	})
}

// sqlStore opens a store of dialect d on a table of the test's own, dropped
// when the test ends.
func sqlStore(t *testing.T, driver, dsn string, d sqlstore.Dialect) *sqlstore.Store {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := sqlstore.New(db, d, sqlstore.WithTable(testenv.SQLTable(t, driver, dsn, "prop")))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(t.Context()))
	return s
}

// acceptsStale is a deliberately broken store: it ignores the fence on Put,
// as a store that checks and writes in two steps would under a race.
type acceptsStale struct{ *memory.Store }

func (s acceptsStale) Put(ctx context.Context, key string, value []byte, tok fence.Token) error {
	if err := s.Store.Put(ctx, key, value, tok); errors.Is(err, fence.ErrStale) {
		h, _ := s.Highest(ctx, key)
		_ = s.Delete(ctx, key, h)
		return s.Store.Put(ctx, key, value, h)
	}
	return nil
}

func TestStorePropertiesCatchStaleAcceptingStore(t *testing.T) {
	rec := mustFail(t, "MutantStoreAcceptsStale")
	rapid.Check(rec, storeMachineBody(acceptsStale{memory.New()}))
	// A write the reference refuses must be refused: the mutant lets a
	// refused write through (a stale token, or the zero token it passes on).
	rec.caught(t, regexp.MustCompile(`adapter says <nil>, reference says .*(stale token|zero token)`),
		"the store machine accepted a store that takes stale writes")
}
