package history_test

import (
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/redfence/redfence/jepsen/internal/history"
)

const a, b = "owner-a", "owner-b"

func acq(owner string) history.Acquire { return history.Acquire{Name: "n", Owner: owner} }
func rel(owner string, t uint64) history.Release {
	return history.Release{Name: "n", Owner: owner, Token: fenceToken(t)}
}
func got(t uint64, depth int64) history.AcquireResult {
	return history.AcquireResult{Acquired: true, Token: fenceToken(t), Depth: depth}
}
func left(depth int64) history.ReleaseResult {
	return history.ReleaseResult{Released: true, Depth: depth}
}

var (
	refused = history.AcquireResult{}
	notHeld = history.ReleaseResult{}
)

func TestLockModelAcceptsCorrectHistories(t *testing.T) {
	for name, h := range map[string][]porcupine.Operation{
		"reentry and release in order": seq(
			acq(a), got(1, 1), acq(a), got(1, 2), acq(b), refused,
			rel(a, 1), left(1), rel(a, 1), left(0), rel(a, 1), notHeld,
			acq(b), got(2, 1), rel(a, 2), notHeld, rel(b, 1), notHeld,
			rel(b, 2), left(history.AnyDepth)),
		"a retried release of an ownership that ended, before anyone took the lock": seq(
			acq(a), got(1, 1), rel(a, 1), left(0), rel(a, 1), left(history.AnyDepth),
			acq(b), got(2, 1), rel(a, 1), notHeld, acq(a), refused),
		"tokens may skip": seq(acq(a), got(3, 1), rel(a, 3), left(0), acq(b), got(7, 1)),
		"overlapping acquires, either order": ops(
			step{client: 0, call: 0, ret: 10, in: acq(a), out: refused},
			step{client: 1, call: 1, ret: 9, in: acq(b), out: got(1, 1)}),
		"unknown acquire that never happened": ops(
			step{client: 0, call: 0, in: acq(a), out: history.Unknown},
			step{client: 1, call: 5, ret: 6, in: acq(b), out: got(1, 1)}),
		"unknown acquire that happened": ops(
			step{client: 0, call: 0, in: acq(a), out: history.Unknown},
			step{client: 1, call: 5, ret: 6, in: acq(b), out: refused}),
		"unknown acquire whose token a release reveals": ops(
			step{client: 0, call: 0, in: acq(a), out: history.Unknown},
			step{client: 1, call: 5, ret: 6, in: acq(b), out: refused},
			step{client: 2, call: 7, ret: 8, in: rel(a, 4), out: left(0)},
			step{client: 1, call: 9, ret: 10, in: acq(b), out: got(5, 1)}),
		"unknown release that happened": ops(
			step{client: 0, call: 0, ret: 1, in: acq(a), out: got(1, 1)},
			step{client: 0, call: 2, in: rel(a, 1), out: history.Unknown},
			step{client: 1, call: 5, ret: 6, in: acq(b), out: got(2, 1)}),
	} {
		t.Run(name, func(t *testing.T) {
			if v := verdict(history.LockModel(), h); v != porcupine.Ok {
				t.Fatalf("verdict %s, want Ok", v)
			}
		})
	}
}

func TestLockModelRejectsBrokenLocks(t *testing.T) {
	for name, h := range map[string][]porcupine.Operation{
		"fresh acquire with a lower token": seq(acq(a), got(5, 1), rel(a, 5), left(0), acq(b), got(4, 1)),
		"fresh acquire reusing a token":    seq(acq(a), got(5, 1), rel(a, 5), left(0), acq(b), got(5, 1)),
		"two owners at once":               seq(acq(a), got(1, 1), acq(b), got(2, 1)),
		"reentry with a new token":         seq(acq(a), got(1, 1), acq(a), got(2, 2)),
		"reentry without deepening":        seq(acq(a), got(1, 1), acq(a), got(1, 1)),
		"fresh acquire at depth 2":         seq(acq(a), got(1, 2)),
		"release by another owner":         seq(acq(a), got(1, 1), rel(b, 1), left(0)),
		"a retried release done after another took the lock": seq(
			acq(a), got(1, 1), rel(a, 1), left(0), acq(b), got(2, 1), rel(b, 2), left(0), rel(a, 1), left(history.AnyDepth)),
		"a retried release done while another holds": seq(
			acq(a), got(1, 1), rel(a, 1), left(0), acq(b), got(2, 1), rel(a, 1), left(0)),
		"release with a stale token frees": seq(acq(a), got(1, 1), rel(a, 1), left(0), acq(a), got(2, 1), rel(a, 1), left(0), acq(b), got(3, 1)),
		"release reports a wrong depth":    seq(acq(a), got(1, 1), acq(a), got(1, 2), rel(a, 1), left(0)),
		"holder refused its own release":   seq(acq(a), got(1, 1), rel(a, 1), notHeld),
		"refused while free":               seq(acq(a), refused),
		"refused the holder's reentry":     seq(acq(a), got(1, 1), acq(a), refused),
		"unknown acquire cannot explain a lower token": ops(
			step{client: 0, call: 0, ret: 1, in: acq(a), out: got(3, 1)},
			step{client: 0, call: 2, ret: 3, in: rel(a, 3), out: left(0)},
			step{client: 1, call: 4, in: acq(b), out: history.Unknown},
			step{client: 2, call: 5, ret: 6, in: acq(a), out: got(2, 1)}),
	} {
		t.Run(name, func(t *testing.T) {
			if v := verdict(history.LockModel(), h); v != porcupine.Illegal {
				t.Fatalf("verdict %s, want Illegal", v)
			}
		})
	}
}

// TestLockModelPartitionsByName checks names independently: the same
// token on two names is fine.
func TestLockModelPartitionsByName(t *testing.T) {
	h := seq(
		history.Acquire{Name: "x", Owner: a}, got(1, 1),
		history.Acquire{Name: "y", Owner: b}, got(1, 1),
		history.Release{Name: "x", Owner: a, Token: 1}, left(0),
	)
	if v := verdict(history.LockModel(), h); v != porcupine.Ok {
		t.Fatalf("verdict %s, want Ok", v)
	}
}

// The lock client undoes an acquire of unknown outcome inside the same
// call: others can see the lock held, then free, with no release. Without
// the recorded Abandon that history has no linearization; with it, it has.
func TestLockModelAbandonedAcquire(t *testing.T) {
	h := []step{
		{client: 0, call: 0, in: acq(a), out: history.Unknown},
		{client: 1, call: 5, ret: 6, in: acq(b), out: refused}, // saw a's hold
		{client: 1, call: 9, ret: 10, in: acq(b), out: got(7, 1)},
	}
	if v := verdict(history.LockModel(), ops(h...)); v != porcupine.Illegal {
		t.Fatalf("without the abandon: verdict %s, want Illegal", v)
	}
	h = append(h, step{client: 2, call: 0, in: history.Abandon{Name: "n", Owner: a}, out: history.Unknown})
	if v := verdict(history.LockModel(), ops(h...)); v != porcupine.Ok {
		t.Fatalf("with the abandon: verdict %s, want Ok", v)
	}
}
