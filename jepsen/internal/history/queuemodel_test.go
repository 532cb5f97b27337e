package history_test

import (
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/jepsen/internal/history"
)

func qlock(owner, level string) history.QAcquire {
	return history.QAcquire{Name: "n", Owner: owner, Level: level, Wait: true}
}

func qtry(owner, level string) history.QAcquire {
	return history.QAcquire{Name: "n", Owner: owner, Level: level}
}

func qrel(owner, level string, t fence.Token) history.QRelease {
	return history.QRelease{Name: "n", Owner: owner, Level: level, Token: t}
}

func qleave(owner, level string) history.QLeave {
	return history.QLeave{Name: "n", Owner: owner, Level: level}
}

var qrefused = history.AcquireResult{}

const c = "owner-c"

func TestQueueModelAcceptsFairHistories(t *testing.T) {
	for name, h := range map[string][]porcupine.Operation{
		"first come, first served": seq(
			qlock(a, "a1"), got(1, 1), qlock(b, "b1"), qrefused, qlock(c, "c1"), qrefused,
			qrel(a, "a1", 1), left(0), qlock(c, "c1"), qrefused, qlock(b, "b1"), got(2, 1),
			qrel(b, "b1", 2), left(0), qlock(c, "c1"), got(3, 1)),
		"trylock hands a free lock to the waiter": seq(
			qlock(a, "a1"), got(1, 1), qlock(b, "b1"), qrefused, qrel(a, "a1", 1), left(0),
			qtry(c, "c1"), qrefused, qlock(b, "b1"), got(2, 1)),
		"reentry never queues": seq(
			qlock(a, "a1"), got(1, 1), qlock(b, "b1"), qrefused, qtry(a, "a2"), got(1, 2),
			qrel(a, "a1", 1), left(1), qrel(a, "a2", 1), left(0), qlock(b, "b1"), got(2, 1)),
		"a waiter that leaves gives the lock on": seq(
			qlock(a, "a1"), got(1, 1), qlock(b, "b1"), qrefused, qlock(c, "c1"), qrefused,
			qrel(a, "a1", 1), left(0), qleave(b, "b1"), history.LeaveResult{Removed: true},
			qlock(c, "c1"), got(3, 1)),
	} {
		t.Run(name, func(t *testing.T) {
			if v := verdict(history.QueueLockModel(), h); v != porcupine.Ok {
				t.Fatalf("verdict %s, want Ok", v)
			}
		})
	}
}

func TestQueueModelRejectsUnfairHistories(t *testing.T) {
	for name, h := range map[string][]porcupine.Operation{
		"the newest waiter served first": seq(
			qlock(a, "a1"), got(1, 1), qlock(b, "b1"), qrefused, qlock(c, "c1"), qrefused,
			qrel(a, "a1", 1), left(0), qlock(c, "c1"), got(2, 1)),
		"trylock jumps the queue": seq(
			qlock(a, "a1"), got(1, 1), qlock(b, "b1"), qrefused, qrel(a, "a1", 1), left(0),
			qtry(c, "c1"), got(2, 1)),
		"a waiter refused its handed lock": seq(
			qlock(a, "a1"), got(1, 1), qlock(b, "b1"), qrefused, qrel(a, "a1", 1), left(0),
			qlock(b, "b1"), qrefused),
		"a handed lock with an old token": seq(
			qlock(a, "a1"), got(5, 1), qlock(b, "b1"), qrefused, qrel(a, "a1", 5), left(0),
			qlock(b, "b1"), got(5, 1)),
	} {
		t.Run(name, func(t *testing.T) {
			if v := verdict(history.QueueLockModel(), h); v != porcupine.Illegal {
				t.Fatalf("verdict %s, want Illegal", v)
			}
		})
	}
}
