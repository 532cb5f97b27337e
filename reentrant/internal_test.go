package reentrant

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// An error reply proves a script did not run, unless it came after the
// script granted the lock (a poll's WAIT): that level must be undone.
func TestMayHaveRunAfterAGrant(t *testing.T) {
	var reply error = replyError("ERR WAIT cannot be used with replica instances")
	if mayHaveRun(reply, false) {
		t.Fatal("an error reply alone proves the command did not run")
	}
	if !mayHaveRun(&grantedError{reply}, false) {
		t.Fatal("an error after the grant leaves a level to undo")
	}
	var r redis.Error
	if !errors.As(&grantedError{reply}, &r) {
		t.Fatal("the server's error must stay reachable with errors.As")
	}
}

// replyError is an error reply as go-redis types them.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// Every retry loop's delays double up to the cap; with jitter each is drawn
// from [d/2, d].
func TestBackoff(t *testing.T) {
	b := backoff{next: 5 * time.Millisecond, max: 30 * time.Millisecond}
	var got []time.Duration
	for range 5 {
		got = append(got, b.delay())
	}
	want := []time.Duration{5, 10, 20, 30, 30}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("delays %v, want %v ms", got, want)
		}
	}
	j := backoff{next: 8 * time.Millisecond, max: 8 * time.Millisecond, jitter: true}
	for range 100 {
		if d := j.delay(); d < 4*time.Millisecond || d > 8*time.Millisecond {
			t.Fatalf("jittered delay %v outside [4ms, 8ms]", d)
		}
	}
	done := make(chan struct{})
	close(done)
	if sleep(done, time.Hour) {
		t.Fatal("sleep slept although done was closed")
	}
	if !sleep(nil, time.Millisecond) {
		t.Fatal("sleep did not sleep its delay")
	}
}

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

// A waiter with no message polls at least every quarter of the handoff
// timeout (plus jitter), at most every max retry delay, and sooner when the
// holder's lease ends sooner, never with a zero delay: so a lock handed to
// a dead waiter (leased for half the handoff timeout) reaches the next
// waiter within the handoff timeout (TestDeadWaiterDelaysNextByAtMostTheBound).
func TestPollDelayBounds(t *testing.T) {
	for _, tc := range []struct {
		opts      []ClientOption
		holderTTL time.Duration
		max       time.Duration // jitter excluded
	}{
		{nil, -1, DefaultHandoffTimeout / 4},
		{nil, time.Minute, DefaultHandoffTimeout / 4},
		{nil, 40 * time.Millisecond, 40 * time.Millisecond},
		{nil, 0, 0},
		{[]ClientOption{WithHandoffTimeout(8 * time.Second), WithMaxRetryDelay(300 * time.Millisecond)}, -1, 300 * time.Millisecond},
		{[]ClientOption{WithHandoffTimeout(400 * time.Millisecond)}, -1, 100 * time.Millisecond},
	} {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
		c, err := New(rdb, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		r := &call{c: c, cfg: &c.cfg.lease}
		for n := 1; n <= 50; n++ {
			d := r.pollDelay(n, tc.holderTTL)
			if d <= 0 || d > tc.max+c.cfg.jitter {
				t.Fatalf("opts %d, holder TTL %v: poll %d after %v, want (0, %v + jitter %v]", len(tc.opts), tc.holderTTL, n, d, tc.max, c.cfg.jitter)
			}
		}
		_ = c.Close()
		_ = rdb.Close()
	}
}

// A handoff message gives its waiter the token and, for a permit, the
// slot; a message without one (a release of an earlier version) or with a
// malformed one gives no slot, and the permit is then claimed in Redis.
func TestDeliverReadsTheSlot(t *testing.T) {
	n := &notifier{waiters: map[string]*waiter{}}
	for _, c := range []struct {
		msg  string
		tok  uint64
		slot int64 // plus one; 0: none
	}{
		{"lv 123", 123, 0},
		{"lv 123 5", 123, 6},
		{"lv 123 0", 123, 1},
		{"lv 123 x", 123, 0},
		{"lv 123 -1", 123, 0},
		{"lv x 5", 0, 0},
	} {
		w := &waiter{n: n, level: "lv"}
		n.waiters["lv"] = w
		n.deliver(c.msg)
		if got, slot := w.handed.Load(), w.handedSlot.Load(); got != c.tok || slot != c.slot {
			t.Errorf("%q: token %d, slot+1 %d; want %d, %d", c.msg, got, slot, c.tok, c.slot)
		}
	}
}
