package redfence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"pgregory.net/rapid"

	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

// wait starts a Lock by an owner that neither holds the lock nor waits for
// it, while another owner holds it: the call joins the queue.
func (lm *lockMachine) wait(t *rapid.T) {
	if lm.m.owner == -1 {
		t.Skip("free: Lock would not wait")
	}
	var idle []int
	for o := range lm.owners {
		if o != lm.m.owner && !slices.ContainsFunc(lm.queue, func(w *waiterRec) bool { return w.owner == o }) {
			idle = append(idle, o)
		}
	}
	if len(idle) == 0 {
		t.Skip("every other owner waits already")
	}
	o := rapid.SampledFrom(idle).Draw(t, "waiter")
	ctx, cancel := context.WithCancel(lm.owners[o])
	w := &waiterRec{owner: o, cancel: cancel, res: make(chan waitResult, 1)}
	go func() {
		l, err := lm.c.Lock(ctx, lm.name)
		w.res <- waitResult{l, err}
	}()
	lm.queue = append(lm.queue, w)
	lm.awaitWaiters(t)
}

// leave ends a waiter's context: its Lock fails and it leaves the queue.
func (lm *lockMachine) leave(t *rapid.T) {
	if len(lm.queue) == 0 {
		t.Skip("nobody waits")
	}
	i := rapid.IntRange(0, len(lm.queue)-1).Draw(t, "leaving waiter")
	w := lm.queue[i]
	lm.hist = append(lm.hist, fmt.Sprintf("  leave owner %d", w.owner))
	lm.queue = slices.Delete(lm.queue, i, i+1)
	w.cancel()
	if r := lm.result(t, w); !errors.Is(r.err, reentrant.ErrNotAcquired) {
		t.Fatalf("a waiter whose context ended got %v, want ErrNotAcquired", r.err)
	}
	lm.awaitWaiters(t)
}

// handOff is what the model does when the lock becomes free: the oldest
// waiter gets it, with the next token, at depth 1.
func (lm *lockMachine) handOff(t *rapid.T) {
	if len(lm.queue) == 0 {
		return
	}
	w := lm.queue[0]
	lm.queue = lm.queue[1:]
	r := lm.resultFirst(t, w)
	if r.err != nil {
		t.Fatalf("the oldest waiter (owner %d) got %v, want the lock", w.owner, r.err)
	}
	if r.lease.Token() != lm.m.last+1 || r.lease.Depth() != 1 || r.lease.Owner() != mustOwner(lm.owners[w.owner]) {
		t.Fatalf("handoff gave owner %s token %d depth %d; want owner %d token %d depth 1",
			r.lease.Owner(), r.lease.Token(), r.lease.Depth(), w.owner, lm.m.last+1)
	}
	lm.m = lockModel{owner: w.owner, depth: 1, token: r.lease.Token(), last: r.lease.Token()}
	lm.hist = append(lm.hist, fmt.Sprintf("  handoff owner %d token %d level %s", w.owner, r.lease.Token(), r.lease.ID()))
	lm.leases = append(lm.leases, &leaseRec{owner: w.owner, lease: r.lease, live: true})
	lm.awaitWaiters(t)
}

// resultFirst waits for the oldest waiter w's outcome, failing at once if
// another queued waiter gets the lock first: the fairness invariant.
func (lm *lockMachine) resultFirst(t *rapid.T, w *waiterRec) waitResult {
	deadline := time.After(3 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case r := <-w.res:
			return r
		case <-deadline:
			return lm.result(t, w) // reports the state
		case <-tick.C:
			for _, other := range lm.queue {
				select {
				case r := <-other.res:
					other.res <- r // for its own turn, or for stop when the case ends
					if r.err == nil {
						t.Fatalf("unfair handoff: the lock went to owner %d (token %d) while owner %d waited longer", other.owner, r.lease.Token(), w.owner)
					}
				default:
				}
			}
		}
	}
}

// result waits for a waiter's outcome: it comes within a few polls (10 ms
// each), so 3 s means it never will.
func (lm *lockMachine) result(t *rapid.T, w *waiterRec) waitResult {
	select {
	case r := <-w.res:
		return r
	case <-time.After(3 * time.Second):
		st, err := lm.c.Inspect(context.Background(), lm.name)
		q := lm.b.Client.ZRange(context.Background(), lua.KeysFor(propPrefix, lm.name).Queue, 0, -1).Val()
		t.Fatalf("owner %d's Lock did not return; state %+v (%v), queue %q", w.owner, st, err, q)
		return waitResult{}
	}
}

// awaitWaiters waits until Redis's queue has the model's length: a Lock
// call queues, and a leaving one dequeues, a little after it starts or
// ends.
func (lm *lockMachine) awaitWaiters(t *rapid.T) {
	var st reentrant.State
	for range 1000 {
		var err error
		if st, err = lm.c.Inspect(context.Background(), lm.name); err != nil {
			t.Fatal(err)
		}
		if st.Waiters == int64(len(lm.queue)) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d waiters queued, model %d", st.Waiters, len(lm.queue))
}
