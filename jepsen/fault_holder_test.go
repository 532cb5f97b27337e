//go:build unix

package jepsen_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/tuning"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/redisstore"
	"github.com/redfence/redfence/storage/sqlstore"
)

// A holder: one lock client and one fenced store, looping over critical
// sections. It runs in a re-executed test binary for the client-pause
// scenario and as a goroutine for the others.
type faultHolder struct {
	proc      int
	lock      *reentrant.Client
	store     storage.Store
	name      string        // lock name
	keys      []string      // every step writes each key once
	steps     int           // write steps per critical section
	gap       time.Duration // between steps
	lockWait  time.Duration // how long one Lock may wait
	opTimeout time.Duration // bound of one write or unlock
	emit      func(faultOp)
	// gate, if set, is called after the section's first step, holding the
	// lock: the test uses it to freeze the holder there.
	gate func(token fence.Token)
	// holding, if set, is told the holder's proc on acquire and -1 after
	// unlock, so a test can aim a fault at the current holder.
	holding *atomic.Int64
}

// round runs one critical section: Lock, steps×keys fenced writes, Unlock.
// It writes every step even after the lease reports itself lost, like a
// holder that never checks: those are the writes fencing must refuse.
// It returns false if ctx ended.
func (h *faultHolder) round(ctx context.Context, round int) bool {
	// The lease lives as long as the context Lock was given, so the wait
	// is bounded by a timer that cancels it only while Lock is waiting: a
	// context.WithTimeout here would end the lease, and its renewal, when
	// the timeout fired.
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	waiting := time.AfterFunc(h.lockWait, rcancel)
	start, wall := faultNow(), time.Now().UnixNano()
	l, err := h.lock.Lock(rctx, h.name)
	waiting.Stop()
	op := faultOp{Proc: h.proc, Kind: faultLock, Outcome: faultOutcome(faultLock, err), Start: start, End: faultNow(), Wall: wall}
	if err != nil {
		if ctx.Err() != nil {
			return false // the test is over: not an outcome worth recording
		}
		op.Err = err.Error()
		h.emit(op)
		// Back off briefly so a dead server is not hammered.
		return faultSleep(ctx, 20*time.Millisecond)
	}
	tok := l.Token()
	op.Token = uint64(tok)
	h.emit(op)
	if h.holding != nil {
		h.holding.Store(int64(h.proc))
	}
	var lostAt atomic.Int64
	context.AfterFunc(l.Context(), func() {
		if errors.Is(context.Cause(l.Context()), reentrant.ErrNotHeld) {
			lostAt.Store(faultNow())
		}
	})

	seq := 0
	for step := range h.steps {
		switch {
		case step == 1 && h.gate != nil:
			h.gate(tok)
		case step > 0:
			faultSleep(ctx, h.gap)
		}
		for _, k := range h.keys {
			seq++
			h.write(k, fmt.Sprintf("p%d-r%d-t%d-s%d", h.proc, round, tok, seq), tok, lostAt.Load() != 0)
		}
	}

	if h.holding != nil {
		h.holding.CompareAndSwap(int64(h.proc), -1)
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.opTimeout)
	start, wall = faultNow(), time.Now().UnixNano()
	err = l.Unlock(uctx)
	cancel()
	op = faultOp{Proc: h.proc, Kind: faultUnlock, Token: uint64(tok), Outcome: faultOutcome(faultUnlock, err), Start: start, End: faultNow(), Wall: wall, LostAt: lostAt.Load()}
	if err != nil {
		op.Err = err.Error()
	}
	h.emit(op)
	// A short think time: a holder that re-locks the instant it unlocks
	// wins the race against the waiters it just woke almost every time.
	return faultSleep(ctx, 5*time.Millisecond+rand.N(20*time.Millisecond))
}

func (h *faultHolder) write(key, value string, tok fence.Token, afterLoss bool) {
	// Not the lease's context: a holder that ignores loss writes anyway.
	ctx, cancel := context.WithTimeout(context.Background(), h.opTimeout)
	defer cancel()
	start, wall := faultNow(), time.Now().UnixNano()
	err := h.store.Put(ctx, key, []byte(value), tok)
	op := faultOp{Proc: h.proc, Kind: faultWrite, Key: key, Value: value, Token: uint64(tok),
		Outcome: faultOutcome(faultWrite, err), Start: start, End: faultNow(), Wall: wall, AfterLoss: afterLoss}
	if err != nil {
		op.Err = err.Error()
	}
	h.emit(op)
}

// faultSleep sleeps d or until ctx ends, and reports whether ctx is live.
func faultSleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// The helper process.
const (
	// faultHelperVar selects the helper mode of a re-executed test binary.
	faultHelperVar = "REDFENCE_FAULT_HELPER"
	// faultHolderConfigVar carries the holder's faultHolderConfig as JSON.
	faultHolderConfigVar = "REDFENCE_FAULT_HOLDER_CONFIG"
)

// faultHolderConfig configures one holder process.
type faultHolderConfig struct {
	Proc      int      `json:"proc"`
	RedisAddr string   `json:"redis_addr"` // the lock, and the Redis store
	Store     string   `json:"store"`      // "redis", "postgres" or "broken" (a broken store over Redis)
	Prefix    string   `json:"prefix"`     // the Redis store's key prefix
	PGURL     string   `json:"pg_url"`
	Table     string   `json:"table"`
	Name      string   `json:"name"` // lock name
	Keys      []string `json:"keys"`
	Rounds    int      `json:"rounds"`
	Steps     int      `json:"steps"`
	GapMS     int      `json:"gap_ms"`
	TTLMS     int      `json:"ttl_ms"`
}

// faultOpenStore opens a fenced store of the given kind; close releases
// what it opened. The test uses it too, to read the final records.
func faultOpenStore(c faultHolderConfig) (s storage.Store, close func(), err error) {
	switch c.Store {
	case "redis", "broken":
		rdb := redis.NewClient(&redis.Options{Addr: c.RedisAddr, DisableIdentity: true})
		rs, err := redisstore.New(rdb, redisstore.WithPrefix(c.Prefix))
		if err != nil {
			_ = rdb.Close()
			return nil, nil, err
		}
		if c.Store == "broken" {
			return &faultBrokenStore{Store: rs}, func() { _ = rdb.Close() }, nil
		}
		return rs, func() { _ = rdb.Close() }, nil
	case "postgres":
		db, err := sql.Open("pgx", c.PGURL)
		if err != nil {
			return nil, nil, err
		}
		ss, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(c.Table))
		if err != nil {
			_ = db.Close()
			return nil, nil, err
		}
		return ss, func() { _ = db.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown store kind %q", c.Store)
}

// TestHelperHolderProcess is not a test: the client-pause scenario
// re-executes the test binary with REDFENCE_FAULT_HELPER=holder to run
// lock holders as separate processes it can SIGSTOP. Without the variable
// it returns at once.
//
// The holder prints each operation as a JSON line on stdout, then
// {"kind":"gate"} after the first step of each critical section, and waits
// for a line on stdin before going on; {"kind":"done"} ends its output.
func TestHelperHolderProcess(t *testing.T) {
	if os.Getenv(faultHelperVar) != "holder" {
		return
	}
	var c faultHolderConfig
	if err := json.Unmarshal([]byte(os.Getenv(faultHolderConfigVar)), &c); err != nil {
		t.Fatalf("%s: %v", faultHolderConfigVar, err)
	}
	store, closeStore, err := faultOpenStore(c)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	ttl := time.Duration(c.TTLMS) * time.Millisecond
	rdb := redis.NewClient(&redis.Options{Addr: c.RedisAddr, DisableIdentity: true})
	defer rdb.Close()
	lc, err := reentrant.New(rdb, reentrant.WithTTL(ttl), tuning.MaxRetryDelay(ttl).(reentrant.ClientOption))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()

	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(op faultOp) {
		mu.Lock()
		defer mu.Unlock()
		if err := enc.Encode(op); err != nil {
			os.Exit(3) // the test is gone
		}
	}
	stdin := bufio.NewReader(os.Stdin)
	h := &faultHolder{
		proc: c.Proc, lock: lc, store: store, name: c.Name, keys: c.Keys, steps: c.Steps,
		gap: time.Duration(c.GapMS) * time.Millisecond, lockWait: 10 * time.Second, opTimeout: 5 * time.Second,
		emit: emit,
		gate: func(tok fence.Token) {
			emit(faultOp{Proc: c.Proc, Kind: "gate", Token: uint64(tok), Start: faultNow()})
			if _, err := stdin.ReadString('\n'); err != nil {
				os.Exit(3) // stdin closed: the test is gone
			}
		},
	}
	ctx := context.Background()
	for r := range c.Rounds {
		h.round(ctx, r)
	}
	emit(faultOp{Proc: c.Proc, Kind: "done", Start: faultNow()})
}
