package reentrant

import (
	"context"
	"errors"
	"sync"
	"time"
)

// minTick bounds the renewer's tick below, so that a tiny renew interval
// does not make it spin.
const minTick = time.Millisecond

// renewer keeps every ownership of one Client alive: one goroutine that,
// each tick, sends one pipeline carrying the renewal of every ownership
// whose renewal is due, so that 10,000 held locks cost about one round trip
// per Redis node per tick instead of 10,000 goroutines and round trips.
//
// An ownership is due renew after its acquisition or its last renewal
// attempt, and is picked at the last tick at or before that: up to one tick
// early, never late (scheduling aside). Since New refuses a renew interval
// of TTL - margin or more, some attempt is always sent before the local
// deadline. The renewer only ever shortens the wait; loss stays with each
// ownership's timer, which needs no reply.
//
// The goroutine runs while some ownership is registered: it starts with the
// first and exits at the first tick that finds none, or when the Client
// closes.
//
// Every tick reads the whole schedule, so the schedule is a slice of small
// entries rather than the ownerships themselves: with 10,000 leases, a
// tick reads 10,000 entries side by side in memory instead of 10,000
// ownerships and their contexts scattered over the heap.
type renewer struct {
	c     *Client
	epoch time.Time // the origin of the schedule's times

	kick chan struct{} // wakes run to re-arm its timer for an earlier tick

	mu      sync.Mutex
	tick    time.Duration // a quarter of the shortest renew interval registered
	sched   []entry       // the registered ownerships; o.entry is o's index
	running bool
}

// entry is one registered ownership's renewal bookkeeping.
type entry struct {
	next     time.Duration // when the next renewal is due, since epoch
	renew    time.Duration // the ownership's renew interval
	o        *ownership
	inflight bool // a renewal was sent and has not returned
}

func newRenewer(c *Client) *renewer {
	return &renewer{c: c, epoch: time.Now(), tick: tickFor(c.cfg.lease.renew), kick: make(chan struct{}, 1)}
}

// at is t on the schedule's clock.
func (r *renewer) at(t time.Time) time.Duration { return t.Sub(r.epoch) }

// tickFor is the renewer's tick for a renew interval: a quarter of it, at
// least minTick. Without renewal, one second (no ownership is renewed).
func tickFor(renew time.Duration) time.Duration {
	if renew == 0 {
		return time.Second
	}
	return max(renew/4, minTick)
}

// add registers o, due for renewal at next. An ownership whose call asked
// for a shorter renew interval than the ticks allow makes them shorter
// while it lives, and re-arms the timer at once. (One due sooner than its
// interval, a handed lock's, has a timer of its own: see newOwnership.) Called with c.mu held and c not closed, so the goroutine it may
// start is one Close waits for.
func (r *renewer) add(o *ownership, next time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o.entry = len(r.sched)
	r.sched = append(r.sched, entry{next: r.at(next), renew: o.cfg.renew, o: o})
	old := r.tick
	r.tick = min(r.tick, tickFor(o.cfg.renew))
	if !r.running {
		r.running = true
		r.c.wg.Go(r.run)
		return
	}
	if r.tick < old {
		select {
		case r.kick <- struct{}{}:
		default: // a kick is pending already
		}
	}
}

// run ticks at a steady period (a Ticker, not a Timer re-armed after each
// batch, whose drift would make every renewal a whole tick early), and
// takes a new period when the tick changes.
func (r *renewer) run() {
	tick := r.tickNow()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-r.c.bg.Done():
			return
		case <-t.C:
		case <-r.kick:
		}
		if now := r.tickNow(); now != tick {
			tick = now
			t.Reset(tick)
		}
		batch, idle := r.due(time.Now())
		if idle {
			return
		}
		if len(batch) > 0 {
			r.send(batch)
		}
	}
}

func (r *renewer) tickNow() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tick
}

// renewNow renews o at once, outside the ticks, unless it has ended or a
// renewal of it is in flight.
func (r *renewer) renewNow(o *ownership) {
	r.mu.Lock()
	if o.entry < 0 || o.ctx.Err() != nil || r.sched[o.entry].inflight {
		r.mu.Unlock()
		return
	}
	s := &r.sched[o.entry]
	s.inflight = true
	s.next = r.at(time.Now()) + s.renew
	r.mu.Unlock()
	if !r.c.goBackground(func() { r.send([]*ownership{o}) }) {
		r.settled([]*ownership{o})
	}
}

// settled marks the renewals of batch as returned.
func (r *renewer) settled(batch []*ownership) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range batch {
		if o.entry >= 0 {
			r.sched[o.entry].inflight = false
		}
	}
}

// drop forgets o, which has ended, if it is registered.
func (r *renewer) drop(o *ownership) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.remove(o)
}

// remove takes o out of the schedule, moving the last entry into its place;
// called with r.mu held.
func (r *renewer) remove(o *ownership) {
	i := o.entry
	if i < 0 {
		return
	}
	last := len(r.sched) - 1
	r.sched[i] = r.sched[last]
	r.sched[i].o.entry = i
	r.sched[last] = entry{}
	r.sched = r.sched[:last]
	o.entry = -1
}

// due takes the ownerships whose renewal falls before the next tick and
// that have no renewal in flight, and marks them in flight. It sets the
// tick from the ownerships registered, and reports idle, stopping the
// renewer, when none is left. An ended ownership drops itself (see end);
// one that ended but has not dropped yet is forgotten here when due, and
// is otherwise left alone, so that the scan reads only the schedule.
func (r *renewer) due(now time.Time) (batch []*ownership, idle bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.at(now)
	horizon := t + r.tick
	tick := tickFor(r.c.cfg.lease.renew)
	// Backwards: remove moves the last entry, already seen, into the place
	// of the one it removes.
	for i := len(r.sched) - 1; i >= 0; i-- {
		s := &r.sched[i]
		tick = min(tick, tickFor(s.renew))
		switch {
		case s.inflight || s.next > horizon:
		case s.o.ctx.Err() != nil:
			r.remove(s.o)
		default:
			s.inflight = true
			s.next = t + s.renew
			batch = append(batch, s.o)
		}
	}
	r.tick = tick
	if len(r.sched) == 0 {
		r.running = false
		return nil, true
	}
	return batch, false
}

// send renews batch, waiting for the replies at most half a tick: a
// go-redis client without ContextTimeoutEnabled ignores deadlines on reads,
// and a frozen server must not hold back the renewals of ownerships taken
// meanwhile. A batch still in flight then settles in the background, and
// its ownerships are not sent again until it has.
//
// The batch always runs on a goroutine of its own, never inline as bounded
// may run a call: renew bounds its calls by the renew interval, and its
// retries of busy replies may take that long, far past half a tick.
func (r *renewer) send(batch []*ownership) {
	wait, cancel := context.WithTimeout(r.c.bg, r.tickNow()/2)
	defer cancel()
	done := make(chan struct{})
	if !r.c.goBackground(func() {
		defer close(done)
		r.renew(batch)
	}) {
		r.renew(batch) // closed: nothing runs in the background
		return
	}
	select {
	case <-done:
	case <-wait.Done():
	}
}

// renew sends the batch's renewals and applies the replies. The call's own
// context is bounded by the renew interval, as a single renewal's was.
func (r *renewer) renew(batch []*ownership) {
	longest := time.Duration(0)
	reqs := make([]*extendReq, len(batch))
	for i, o := range batch {
		if o.ext.ttl == 0 { // not made yet: the TTL is never 0
			o.ext = extendReq{ref: o.ref, owner: o.key.owner, token: o.token, ttl: o.cfg.ttl}
		}
		reqs[i] = &o.ext
		longest = max(longest, o.cfg.renew)
	}
	ctx, cancel := context.WithTimeout(r.c.bg, longest)
	defer cancel()
	res := r.c.be.extendBatch(ctx, reqs)
	for i, o := range batch {
		o.renewed(res[i])
	}
	r.settled(batch)
}

// renewed applies one renewal's outcome. Redis saying the ownership is gone,
// or refusing the key as foreign, ends it; any other error changes nothing
// but is kept for the cause of a later loss by the timer.
func (o *ownership) renewed(r extendResult) {
	switch {
	case o.ctx.Err() != nil:
	case r.err == nil && r.held:
		o.confirm(r.sent, o.cfg.ttl)
		o.c.emit(Event{Kind: kindRenewed, Name: o.key.name, Hold: holdNames[o.key.kind], Token: o.token})
	case r.err == nil:
		o.lose(o.lostErr(ErrGone, goneReason(r.forced, "renewal"), nil))
	case refused(r.err):
		o.lose(o.lostErr(ErrGone, "renewal refused", r.err))
	default:
		o.mu.Lock()
		o.lastErr = r.err
		o.mu.Unlock()
		o.c.cfg.log.Warn("reentrant: renewal failed", "name", o.key.name, "token", uint64(o.token), "err", r.err)
		o.c.emit(Event{Kind: kindRenewFailed, Name: o.key.name, Hold: holdNames[o.key.kind], Token: o.token, Err: r.err})
	}
}

// refused reports the scripts' own refusals (ErrForeign, ErrOverflow): the
// script ran, checked, and changed nothing.
func refused(err error) bool { return errors.Is(err, ErrForeign) || errors.Is(err, ErrOverflow) }
