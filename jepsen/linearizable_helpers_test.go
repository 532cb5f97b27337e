// Linearizability: the linearizable_*_test.go files record concurrent
// histories of the lock and the fenced stores, on miniredis, a real Redis,
// PostgreSQL and SQLite, with and without network faults, and check them for
// linearizability with porcupine (see jepsen/internal/history). Each checker is also
// run on a deliberately broken variant, to show it can fail. This file holds
// what the workloads share.
//
// REDFENCE_LONG=1 runs more clients and operations.

package jepsen_test

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/jepsen/internal/history"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/redisstore"
)

// linCheckTimeout bounds each porcupine run. Histories here check in
// milliseconds; a timeout means the workload grew too concurrent.
const linCheckTimeout = 30 * time.Second

// linScale returns the number of concurrent workers and the total operation
// budget of one run: small by default, larger with REDFENCE_LONG=1. An
// environment variable rather than a flag, because a custom flag breaks
// `go test ./...` for every package that does not define it.
func linScale() (workers, ops int) {
	if os.Getenv("REDFENCE_LONG") == "1" {
		return 10, 3000
	}
	return 6, 300
}

// linTTL outlives every run, so no lease expires and the lock model,
// which knows nothing of expiry, applies.
const linTTL = time.Minute

func linReqID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "jepsen:" + hex.EncodeToString(b[:])
}

// linCheck checks one recorded history and logs its figures.
func linCheck(t *testing.T, what string, rec *history.Recorder, m porcupine.Model) history.Counts {
	t.Helper()
	r := history.Linearizable(t, m, rec.Operations(), linCheckTimeout)
	n := rec.Counts()
	t.Logf("%s: %v; check %v", what, n, r)
	return n
}

// linRedisStore returns a redisstore under a prefix of its own, so runs on a
// shared Redis never see each other's keys.
func linRedisStore(t *testing.T, c redis.Scripter) storage.Store {
	t.Helper()
	s, err := redisstore.New(c, redisstore.WithPrefix("jepsen:"+testenv.Unique(t)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
