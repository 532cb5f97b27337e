package reentrant

import "testing"

// A release wakes the call of its name that has waited longest, and only
// that one; a woken call that leaves without the lock passes its wake on
// to the next.
func TestWakesLongestWaitingFirst(t *testing.T) {
	w := newWakes(&Client{}, nil)
	w.closed = true // no connection: subscriptions are not synced
	a, b, c := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
	w.waiters["ch"] = []chan struct{}{a, b, c}
	pending := func(ch chan struct{}) bool { return len(ch) == 1 }

	w.wakeFirst("ch")
	w.wakeFirst("ch") // merged with the pending one
	if !pending(a) || pending(b) || pending(c) {
		t.Fatalf("woken: a %v, b %v, c %v; want a only", pending(a), pending(b), pending(c))
	}
	w.remove("ch", a) // leaves with its wake unused
	if !pending(b) || pending(c) {
		t.Fatalf("after a left: b %v, c %v; want b only", pending(b), pending(c))
	}
	<-b
	w.remove("ch", b) // leaves with no wake pending: nothing is passed on
	if pending(c) {
		t.Fatal("c woken although b had no wake to pass on")
	}
	w.wakeFirst("other")
	w.remove("ch", c)
	if len(w.waiters) != 0 || pending(c) {
		t.Fatalf("waiters left: %v", w.waiters)
	}
}
