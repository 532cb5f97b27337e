//go:build unix

package jepsen_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testkit/redisproc"
	"github.com/redfence/redfence/storage/memory"
)

// Scenario 2: the lock's Redis itself fails. Holders lock on a
// redis-server the test starts and write to a memory store, a different
// backend that survives whatever happens to that server:
//
//   - pause: SIGSTOP past the lease, then SIGCONT;
//   - kill-restart-aof-always: SIGKILL, restart with the AOF; every
//     acknowledged INCR of the fencing counter survives, so no token repeats;
//   - kill-restart-no-aof: SIGKILL, restart empty, once with the strict
//     counter (WithStrictTokens) and once with time tokens (the default). The
//     counter starts again at 1: with the strict counter tokens repeat, and
//     the store, which remembers a higher token, refuses the new holders'
//     writes. That is the liveness cost DESIGN.md warns about, not a safety
//     loss: no older write gets in. With time tokens the next token comes
//     from the server's clock, above every earlier one: nothing repeats.
//   - flushall: FLUSHALL while the holders run, in both modes, with the
//     same promise as a restart without the AOF.
func TestFaultRedisProcess(t *testing.T) {
	cycles, down := 1, time.Second
	if faultLong() {
		cycles, down = 3, 3*time.Second
	}
	strict := faultTokenModes[0]
	t.Run("pause", func(t *testing.T) {
		t.Parallel() // see TestMain
		var resumed int64
		r, ops := runFaultRedis(t, "redis-pause", cycles, strict, func(s *redisproc.Server) {
			s.Pause()
			time.Sleep(down)
			s.Resume()
			resumed = faultNow()
		})
		faultRecord(t, r)
		if !faultGrantedAfter(ops, resumed) {
			t.Errorf("no acquisition after the last resume: the lock made no progress past the fault")
		}
	})
	t.Run("kill-restart-aof-always", func(t *testing.T) {
		t.Parallel() // see TestMain
		var restarted int64
		r, ops := runFaultRedis(t, "redis-kill-restart/aof-always", cycles, strict, func(s *redisproc.Server) {
			s.Crash(200 * time.Millisecond)
			restarted = faultNow()
		}, redisproc.WithAOF("always"))
		faultRecord(t, r)
		if r.TokensRepeated != 0 {
			t.Errorf("with appendfsync always, tokens %v were issued twice", r.Repeated)
		}
		if !faultGrantedAfter(ops, restarted) {
			t.Errorf("no acquisition after the last restart: that no token repeated proves nothing")
		}
	})
	for _, mode := range faultTokenModes {
		t.Run("kill-restart-no-aof/"+mode.name, func(t *testing.T) {
			t.Parallel() // see TestMain
			faultRedisEmptied(t, "redis-kill-restart/no-aof", "a restart without the AOF", cycles, mode, func(s *redisproc.Server) {
				s.Crash(200 * time.Millisecond)
			})
		})
		t.Run("flushall/"+mode.name, func(t *testing.T) {
			t.Parallel() // see TestMain
			faultRedisEmptied(t, "redis-flushall", "FLUSHALL", cycles, mode, func(s *redisproc.Server) {
				c := s.Client()
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := c.FlushAll(ctx).Err(); err != nil {
					t.Errorf("FLUSHALL: %v", err)
				}
			})
		})
	}
}

// faultRedisEmptied runs holders in token mode while empty (a restart
// without the AOF, a FLUSHALL) takes every key of the server, counters and
// floors included, cycles times, and checks the token promise: with time
// tokens (the default) the next token comes from the server's clock, above
// every earlier one, so nothing repeats and nobody is fenced out; with the
// strict counter, which starts again at 1, tokens repeat (the liveness cost
// docs/design.md warns about, not a safety loss: the store refuses the
// repeated holders' writes once it has seen a higher token).
func faultRedisEmptied(t *testing.T, scenario, what string, cycles int, mode faultTokenMode, empty func(*redisproc.Server)) {
	var emptied int64
	r, ops := runFaultRedis(t, scenario+mode.suffix, cycles, mode, func(s *redisproc.Server) {
		empty(s)
		emptied = faultNow()
	})
	faultRecord(t, r)
	if mode.time() {
		if r.TokensRepeated != 0 || r.FencedOut != 0 {
			t.Errorf("with time tokens, %s repeated tokens %v and fenced out %d writes", what, r.Repeated, r.FencedOut)
		}
		if !faultGrantedAfter(ops, emptied) {
			t.Errorf("no acquisition after the last %s: that no token repeated proves nothing", what)
		}
		return
	}
	// Every acquisition after the fault repeats a token (the counter
	// starts again at 1); whether one of those holders also wrote after the
	// store had seen a higher token, and was fenced out, is the scheduler's
	// call, so it is reported, not required. No stale write was accepted
	// either way (faultRecord).
	if r.TokensRepeated == 0 {
		t.Errorf("%s should reset the strict counter: want tokens repeated, got %s", what, r)
	}
	t.Logf("after %s the counter restarted: %d acquisitions got a token issued before, %d writes under them were refused (the store remembered token %d)",
		what, r.TokensRepeated, r.FencedOut, r.Highest)
}

// runFaultRedis runs holders in token mode against a fresh redis-server,
// applying fault cycles times with healthy stretches around it, and checks
// the history, which it returns too.
func runFaultRedis(t *testing.T, scenario string, cycles int, mode faultTokenMode, fault func(*redisproc.Server), opts ...redisproc.Option) (faultReport, []faultOp) {
	srv := redisproc.Start(t, opts...)
	store := memory.New()
	cfg := faultWorkersSize()
	cfg.lockOpts = mode.opts
	w := faultStartWorkers(t, cfg, func(int) redis.UniversalClient {
		return srv.Client(func(o *redis.Options) { *o = *faultRedisOptions(o.Addr) })
	}, store)
	// Each stretch lasts until a holder got through in it as well: the
	// checks compare what came before a fault with what came after.
	time.Sleep(800 * time.Millisecond)
	w.awaitGrant(t, 0)
	for range cycles {
		fault(srv)
		after := faultNow()
		time.Sleep(1200 * time.Millisecond)
		w.awaitGrant(t, after)
	}
	ops := w.stop(t)
	return faultCheck(scenario, ops, faultFinal(t, store, w.keys)), ops
}
