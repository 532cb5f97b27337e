//go:build unix

package jepsen_test

import (
	"errors"
	"os"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/reentrant"
)

// faultLong reports whether the long versions were asked for with
// REDFENCE_LONG=1: more holders, more rounds, longer faults.
func faultLong() bool { return os.Getenv("REDFENCE_LONG") == "1" }

// faultNow reads CLOCK_MONOTONIC, which every process on the machine shares
// (Go's own monotonic readings are relative to each process's start), so
// the operations of re-executed holder processes and of the test can be
// ordered on one clock.
func faultNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // CLOCK_MONOTONIC is always there on the systems we run on
	}
	return ts.Nano()
}

// Operation kinds and outcomes of a faultOp.
const (
	faultLock   = "lock"
	faultWrite  = "write"
	faultUnlock = "unlock"

	faultOK      = "ok"       // lock acquired, write accepted, unlock done
	faultStale   = "stale"    // write refused with fence.ErrStale
	faultFailed  = "failed"   // definitely not applied (lock not acquired in time)
	faultNotHeld = "not_held" // unlock found the lease gone
	// A lock whose acquisition too few replicas acknowledged
	// (reentrant.ErrNotReplicated): undone, no token handed out.
	faultNotReplicated = "not_replicated"
	faultUnknown       = "unknown" // timeout, reset, server gone: may or may not have happened
)

// faultOp is one call as its caller saw it. Holder processes print these as
// JSON lines; in-process workers append them to a faultHistory. Times are
// CLOCK_MONOTONIC nanoseconds (see faultNow); Wall is the Unix time at
// Start, for people reading the logs.
type faultOp struct {
	Proc    int    `json:"proc"`
	Kind    string `json:"kind"`
	Key     string `json:"key,omitempty"`
	Value   string `json:"value,omitempty"`
	Token   uint64 `json:"token,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	Err     string `json:"err,omitempty"`
	Start   int64  `json:"start"`
	End     int64  `json:"end"`
	Wall    int64  `json:"wall"`
	// LostAt is, for an unlock, when the lease's context reported the
	// lease lost (0 if it never did): the holder stopped believing it held
	// the lock then, or at the unlock's Start, whichever came first.
	LostAt int64 `json:"lost_at,omitempty"`
	// AfterLoss marks a write made although the lease had already reported
	// itself lost: the holders here write regardless, like a client that
	// never checks, because that is the write fencing exists for.
	AfterLoss bool `json:"after_loss,omitempty"`
	// Read is, for a fenced read (faultRead) that returned a record, the
	// token the record was written with; Token is the reader's epoch.
	Read uint64 `json:"read,omitempty"`
	// Slot is a semaphore permit's slot, on each operation of its section.
	Slot int `json:"slot,omitempty"`
}

// faultOutcome classifies an error from a lock, write or unlock call.
func faultOutcome(kind string, err error) string {
	switch {
	case err == nil:
		return faultOK
	case kind == faultWrite && errors.Is(err, fence.ErrStale):
		return faultStale
	case kind == faultLock && errors.Is(err, reentrant.ErrNotAcquired):
		// Held by another, or the wait ran out with whatever the attempt
		// took undone. An attempt whose outcome Redis did not confirm is
		// ErrOutcomeUnknown, and falls to faultUnknown below.
		return faultFailed
	case kind == faultLock && errors.Is(err, reentrant.ErrNotReplicated):
		return faultNotReplicated
	case kind == faultUnlock && errors.Is(err, reentrant.ErrNotHeld):
		return faultNotHeld
	}
	return faultUnknown
}

// faultHistory collects operations from several goroutines.
type faultHistory struct {
	mu  sync.Mutex
	ops []faultOp
}

func (h *faultHistory) add(op faultOp) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

func (h *faultHistory) snapshot() []faultOp {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}
