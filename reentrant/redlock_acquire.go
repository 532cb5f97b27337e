package reentrant

// Redlock acquisition: phase 1 (qacquire.lua) on every node, the token from
// the granting majority's counters, phase 2 (qraise.lua), and the undo of
// whatever a failed attempt took.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
)

// acquire makes one Redlock attempt. It returns the lease's reply
// (OK with the token and depth), or not OK with the shortest holder's TTL
// a node reported, having released on every node what the attempt took.
// Nodes that answer after the outcome is decided are undone in the
// background, so a stopped node never delays the attempt past a majority.
func (q *quorum) acquire(ctx context.Context, r *call, _ bool) (acquired, error) {
	c := q.c
	maj, n := q.majority(), len(q.nodes)
	if longest := q.node.Rejoin - drift(r.cfg.ttl); r.cfg.ttl > longest {
		return acquired{}, invalid("TTL %v is longer than this Redlock's rejoin delay allows (%v; see WithRejoinDelay)", r.cfg.ttl, longest)
	}
	sent := time.Now()
	window := r.cfg.window()
	ctx, cancel := context.WithDeadline(ctx, sent.Add(window))
	defer cancel()
	// Each attempt takes its levels under an ID of its own, so that the
	// background undo of an earlier attempt cannot remove a later one's.
	qc := quorumOf(r)
	// The first attempt of a new owner proposes its token: nothing of the
	// owner exists on any node, so a node where the lock is free either
	// takes the lock with the proposal (and its counter rises to it) or
	// leaves the take pending, and a majority that took it makes the
	// token without phase 2: one round trip instead of two.
	proposal := fence.None
	if !qc.attempted && r.newOwner {
		proposal = q.propose(sent)
	}
	if qc.attempted {
		r.level = c.reqID()
	}
	qc.attempted = true
	req := request(r)
	// Nodes that answer after the outcome is decided wait until the client
	// has acted on it (the lease made, or not): a late grant is kept
	// (raised to the token if pending) while the lease it belongs to is
	// live, else undone.
	st := &settled{done: make(chan struct{})}
	final := fence.None
	reentry := false // final is the token the ownership holds already
	defer func() {
		if final == fence.None {
			st.settle(nil)
		}
	}()
	marks := make([]sendMark, n)
	for i, w := range q.watches {
		marks[i] = w.mark()
	}
	// Until every node has answered, Redis may keep what the attempt
	// takes: Close waits for the nodes that answer late (see lateNodes).
	u := c.unsettle(r.name)
	defer func() {
		if final != fence.None {
			// Granted: the late nodes' grants belong to the lease (or
			// are undone by the undo of a lease not made).
			c.settle(u)
		}
	}()
	var lateNodes atomic.Int64
	// A failed attempt stops the node calls that have sent nothing yet
	// (stopNodes), and learns from the late replies (lateErrs) which of
	// them never will.
	nodesCtx, stopNodes := context.WithCancel(c.bg)
	lateErrs := make(chan nodeReply[scripts.QAcquired], n)
	ch := fanOutUnder(q, nodesCtx, window, func(ctx context.Context, _ int, rdb redis.UniversalClient) (scripts.QAcquired, error) {
		return scripts.QAcquirePropose(ctx, rdb, qc.keys, q.node, &req, proposal)
	})
	granted := func(x nodeReply[scripts.QAcquired]) bool { return x.err == nil && x.v.OK }
	// A node that answers within acquireGrace after the majority is read
	// with it, so that its grant needs no command of its own later (a
	// raise, or an undo once the lease was released).
	got, _ := collectGrace(q, ctx, ch, func(got []*nodeReply[scripts.QAcquired]) bool {
		ok := count(got, granted)
		no := count(got, func(x nodeReply[scripts.QAcquired]) bool { return !granted(x) })
		return ok >= maj || n-no < maj
	}, acquireGrace, func(x nodeReply[scripts.QAcquired]) {
		lateErrs <- x
		// The next late reply must reach lateErrs while this one waits
		// for the attempt to be decided.
		handle := func() {
			defer func() {
				if lateNodes.Add(-1) == 0 {
					c.settle(u)
					stopNodes()
				}
			}()
			<-st.done
			q.settleLate(r, x, req, st, final, reentry, proposal)
		}
		select {
		case <-st.done:
			handle()
		default:
			if !c.goSettle(handle) {
				handle()
			}
		}
	})

	if lateNodes.Add(int64(len(got)-count(got, func(nodeReply[scripts.QAcquired]) bool { return true }))) == 0 {
		c.settle(u)
		stopNodes()
	}
	// sentNothing reports whether node i's attempt failed with err before
	// anything reached the node.
	sentNothing := func(i int, err error) bool {
		return !mayHaveRun(err, c.retries) || q.watches[i].sentNothing(marks[i])
	}
	var errs nodeErrors
	holder := time.Duration(-1)
	var ok []int
	unknown := 0 // nodes that may have granted with no reply to say so
	for i, x := range got {
		switch {
		case x == nil:
			unknown++
		case x.err != nil:
			if !sentNothing(i, x.err) {
				unknown++
			}
			errs.add(i, x.err)
			q.undoNode(r, i, req) // it may have run
		case x.v.TooDeep:
			q.undoAll(r, req)
			return acquired{}, fmt.Errorf("%w: the hold is %d deep, the maximum (WithMaxDepth)", ErrTooDeep, x.v.Depth)
		case x.v.OK:
			ok = append(ok, i)
		case holder < 0 || x.v.HolderTTL < holder:
			holder = x.v.HolderTTL
		}
	}
	fail := func(why string) (acquired, error) {
		q.undoAll(r, req)
		cerr := ctxErr(ctx)
		if cerr == nil && len(errs.errs) <= n-maj && len(ok) < maj {
			// Refused by a majority: a later attempt may win.
			return acquired{holderTTL: max(holder, 0), split: len(ok) > 0}, nil
		}
		if len(ok) < maj && len(ok)+unknown >= maj {
			// Those of the nodes that did not answer whose call has sent
			// nothing yet now never will.
			stopNodes()
			unknown -= unsent(lateErrs, got, func(v scripts.QAcquired) bool { return !v.OK }, sentNothing)
		}
		if len(ok)+unknown >= maj {
			// A majority may hold what the attempt took (granted, or with
			// the nodes that did not answer), and its undo goes on in the
			// background.
			if unknown > 0 {
				why += fmt.Sprintf(", %d did not answer", unknown)
			}
			return acquired{}, join(fmt.Errorf("%w: %s; what the nodes granted is undone in the background",
				ErrOutcomeUnknown, why), cerr, errs.err())
		}
		return acquired{}, join(fmt.Errorf("%w: %s", ErrNotAcquired, why), cerr, errs.err())
	}
	if len(ok) < maj {
		return fail(fmt.Sprintf("%d of %d nodes granted it", len(ok), n))
	}

	// Reentry (or a repeat): nodes that hold this ownership's token, and
	// pending ones raised to it, make a majority. Raising a node to a token
	// a majority was already raised to issues no new token.
	tokens := map[fence.Token]int{}
	var top, best, clock fence.Token
	var depth int64
	var pending, took []int
	for _, i := range ok {
		v := got[i].v
		switch {
		case v.Pending:
			pending = append(pending, i)
			clock = max(clock, fence.Token(v.Micros))
		case v.Proposed:
			took = append(took, i)
		default:
			tokens[v.Token]++
			if n := tokens[v.Token]; n > tokens[best] || (n == tokens[best] && v.Token > best) {
				best = v.Token
			}
		}
		top, depth = max(top, v.Token), max(depth, v.Depth)
	}
	if proposal != fence.None {
		q.learn(got, proposal, sent)
		if len(took) >= maj {
			// A majority took the proposal: it is the token. The pending
			// nodes below it are raised to it; one whose counter is at or
			// above it (it refused the proposal for that) remembers a
			// token as high already, and its level goes.
			for _, i := range pending {
				if got[i].v.Token >= proposal {
					q.undoNode(r, i, req)
				} else {
					q.raiseLate(r, i, req, proposal, false, fence.None, nil)
				}
			}
			final = proposal
			return acquired{ok: true, token: proposal, depth: 1, sent: sent, settle: st.settle}, nil
		}
	}
	if votes := tokens[best]; votes > 0 {
		// A pending node whose counter already reached the token (the
		// ownership's hold there expired or was deleted) is raised to it
		// too: held says the token is the ownership's own, issued before.
		reentry = true
		if votes >= maj {
			for _, i := range pending {
				q.raiseLate(r, i, req, best, true, fence.None, nil)
			}
			final = best
			return acquired{ok: true, token: best, depth: depth, sent: sent, settle: st.settle}, nil
		}
		// Nodes where the ownership holds a lower token (a proposal its
		// acquisition did not choose, whose raise is still on its way)
		// are raised with the pending ones.
		for _, i := range ok {
			if v := got[i].v; !v.Pending && !v.Proposed && v.Token < best {
				pending = append(pending, i)
			}
		}
		if raised := q.raise(ctx, r, pending, best, maj-votes, true, fence.None); votes+raised < maj {
			return fail(fmt.Sprintf("token %d held on %d and raised on %d of %d nodes", best, votes, raised, n))
		}
		final = best
		return acquired{ok: true, token: best, depth: depth, sent: sent, settle: st.settle}, nil
	}

	// Fresh: one above every counter of the granting majority and no lower
	// than the latest of their clocks, raised on a majority before it is
	// handed out. The clock is what keeps a token from repeating when a
	// node that remembered the last one restarted empty and the others
	// that remember are out of reach (docs/redlock.md, "A node that
	// restarts empty"). Nodes that took a proposal (fewer than a majority)
	// count it as their counter, and are raised from it.
	tok := max(top+1, clock)
	raised := q.raise(ctx, r, ok, tok, maj, false, proposal)
	if raised < maj {
		return fail(fmt.Sprintf("token %d raised on %d of %d nodes", tok, raised, n))
	}
	if late := time.Since(sent); late >= window {
		return fail(fmt.Sprintf("a majority answered after %v, past the lease's safe window of %v", late.Round(time.Millisecond), window))
	}
	final = tok
	return acquired{ok: true, token: tok, depth: depth, sent: sent, settle: st.settle}, nil
}

// raiseNode is phase 2 on one node for the owner's level: from the
// attempt's proposal, where the node may have taken it (from not
// fence.None, scripts.QRaiseFrom), else as scripts.QRaise with held.
func raiseNode(ctx context.Context, rdb redis.UniversalClient, k scripts.Keys, owner Owner, level string, tok fence.Token, held bool, from fence.Token) (bool, error) {
	if from != fence.None {
		return scripts.QRaiseFrom(ctx, rdb, k, string(owner), level, tok, from)
	}
	return scripts.QRaise(ctx, rdb, k, string(owner), level, tok, held)
}

// acquireGrace bounds how long an acquisition waits, once a majority
// answered, for the nodes that have not.
const acquireGrace = 2 * time.Millisecond

// raise runs phase 2 with tok on the nodes in idx, and returns how many
// confirmed it before ctx ended, need did, or need no longer could; held:
// tok is the token the ownership holds already (see scripts.QRaise);
// from: the attempt's proposal, which nodes that took it are raised from
// (scripts.QRaiseFrom), or fence.None.
func (q *quorum) raise(ctx context.Context, r *call, idx []int, tok fence.Token, need int, held bool, from fence.Token) int {
	on := make([]bool, len(q.nodes))
	for _, i := range idx {
		on[i] = true
	}
	d := time.Second
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl)
	}
	k, level := quorumOf(r).keys, r.level
	ch := fanOut(q, d, func(ctx context.Context, i int, rdb redis.UniversalClient) (bool, error) {
		if !on[i] {
			return false, errSkipped
		}
		return raiseNode(ctx, rdb, k, r.owner, level, tok, held, from)
	})
	yes := func(x nodeReply[bool]) bool { return x.err == nil && x.v }
	got, all := collect(q, ctx, ch, func(got []*nodeReply[bool]) bool {
		no := count(got, func(x nodeReply[bool]) bool { return x.err != errSkipped && !yes(x) })
		return count(got, yes) >= need || len(idx)-no < need
	}, nil)
	if n := count(got, yes); n >= need && !all {
		// Every node that remembers the token keeps a later majority from
		// repeating it should one of these forget (a restart without
		// AOF): the rest, which granted phase 1 just now, get a short
		// grace to confirm too.
		grace := time.NewTimer(max(2*time.Millisecond, r.cfg.window()/50))
		defer grace.Stop()
		for range len(got) - count(got, func(nodeReply[bool]) bool { return true }) {
			select {
			case x := <-ch:
				if yes(x) {
					n++
				}
			case <-grace.C:
				return n
			case <-ctx.Done():
				return n
			}
		}
		return n
	}
	return count(got, yes)
}

// settleLate acts on node reply x of an attempt that answered after the
// attempt was decided (st): a late grant is kept (raised to the token
// final if pending) while the lease it belongs to is live, else undone.
func (q *quorum) settleLate(r *call, x nodeReply[scripts.QAcquired], req scripts.Request, st *settled, final fence.Token, reentry bool, proposal fence.Token) {
	switch {
	case x.err == nil && !x.v.OK:
		// A refusal wrote no level: nothing to undo.
	case st.lease == nil || x.err != nil:
		q.undoNode(r, x.i, req)
	case x.v.Pending:
		q.raiseLate(r, x.i, req, final, reentry, fence.None, st.lease)
	case x.v.Proposed && final != proposal:
		// It took the proposal, and the attempt chose another token.
		q.raiseLate(r, x.i, req, final, false, proposal, st.lease)
	case st.lease.live() != nil:
		// A reentry's level that reached this node after the lease
		// was unlocked (its release may have come first) or lost.
		q.undoNode(r, x.i, req)
	}
}

// unsent waits, at most cleanupBudget/2, for the late replies (from
// lateErrs) of the nodes that had not answered (nil in got) once their
// calls were stopped, and returns how many of them took nothing: refused
// (refused), or failed having sent nothing (sentNothing). A call that had
// sent its command keeps waiting for the reply (go-redis reads on) and is
// not counted, nor is a late grant.
func unsent[T any](lateErrs <-chan nodeReply[T], got []*nodeReply[T], refused func(T) bool, sentNothing func(int, error) bool) int {
	missing := len(got) - count(got, func(nodeReply[T]) bool { return true })
	t := time.NewTimer(cleanupBudget / 2)
	defer t.Stop()
	n := 0
	for range missing {
		select {
		case x := <-lateErrs:
			if x.err == nil && refused(x.v) || x.err != nil && sentNothing(x.i, x.err) {
				n++
			}
		case <-t.C:
			return n
		}
	}
	return n
}

// errSkipped is the reply of a node a fanned-out call does not concern.
var errSkipped = errors.New("node not concerned")

// settled is what became of a Redlock attempt once the client acted on
// it: lease is the lease it made (nil if none), set before done is closed.
type settled struct {
	done  chan struct{}
	lease *Lease
}

func (s *settled) settle(l *Lease) {
	s.lease = l
	close(s.done)
}

// raiseLate raises node i's pending hold of req's level to tok in the
// background, best effort: a node left pending only lets the level expire
// there. With a lease (a grant that answered after the attempt was
// decided), a node raised once that lease is no longer in force (its
// Unlock may have reached the node before the grant did) is released at
// once: it keeps the token in its counter, which is the point, and not
// the lock; one the raise refused is abandoned. Without one the attempt is still deciding, and a lease that
// fails to come of it undoes the level everywhere (newLease). from is the
// proposal node i took, to be raised from (scripts.QRaiseFrom), or
// fence.None for a pending node.
func (q *quorum) raiseLate(r *call, i int, req scripts.Request, tok fence.Token, held bool, from fence.Token, l *Lease) {
	c, rdb, k := q.c, q.nodes[i], quorumOf(r).keys
	c.goBackground(func() {
		ctx, cancel := context.WithTimeout(c.bg, r.cfg.window())
		defer cancel()
		ok, _ := raiseNode(ctx, rdb, k, r.owner, req.Level, tok, held, from)
		switch {
		case l == nil || l.live() == nil:
		case ok:
			_, _ = scripts.Release(ctx, rdb, k, string(r.owner), tok, req.Level, scripts.Tokens{})
		default:
			// Not raised (the node learnt the token from the release's
			// bump): the pending level goes.
			_, _ = scripts.Abandon(ctx, rdb, k, &req)
		}
	})
}

// undoNode removes, in the background, the level req may have taken on
// node i; a node that does not answer keeps it until its lease ends. It
// reports false when it could not start (Close has stopped waiting).
func (q *quorum) undoNode(r *call, i int, req scripts.Request) bool {
	c, rdb, k := q.c, q.nodes[i], quorumOf(r).keys
	u := c.unsettle(r.name)
	return c.goSettle(func() {
		ctx, cancel := context.WithTimeout(c.bg, r.cfg.ttl)
		defer cancel()
		if _, err := scripts.Abandon(ctx, rdb, k, &req); err != nil && !scripts.IsRefusal(err) {
			c.debug("reentrant: Redlock undo failed; the level expires with its lease", "name", r.name, "node", i, "err", err)
			if c.bg.Err() != nil {
				return // Close stopped waiting: it names r's lock
			}
		}
		c.settle(u)
	})
}

// undoAll removes, in the background, the level req may have taken on
// every node, and reports whether every undo started.
func (q *quorum) undoAll(r *call, req scripts.Request) bool {
	ok := true
	for i := range q.nodes {
		ok = q.undoNode(r, i, req) && ok
	}
	return ok
}

// propose returns the token the first attempt of a new owner proposes, sent
// at sent: this host's clock in µs plus the quorum's lead, so that it is
// near the nodes' clocks when it reaches them (a node takes no proposal
// more than scripts.MaxLead from its clock: the token stays near the
// clocks, which the clock floor's argument needs). A
// proposal at or below a node's counter (the name's last token came from
// a host whose clock runs ahead) only costs that attempt phase 2.
func (q *quorum) propose(sent time.Time) fence.Token {
	p := sent.UnixMicro() + q.lead.Load()
	if p <= 0 || fence.Token(p) >= scripts.MaxToken {
		return fence.None
	}
	return fence.Token(p)
}

// learn moves the quorum's lead after an attempt that proposed p at sent,
// towards what each node's clock read, less this host's at the send (the
// node's offset from it plus the request's way there): a quarter of the
// way for a node that took the proposal, all the way for one that left its
// take pending because its clock was more than scripts.MaxLead from p. A
// counter at or above p teaches nothing: it is one name's, and the lead is
// every name's.
func (q *quorum) learn(got []*nodeReply[scripts.QAcquired], p fence.Token, sent time.Time) {
	span := fence.Token(scripts.MaxLead.Microseconds())
	for _, x := range got {
		if x == nil || x.err != nil || !(x.v.Pending || x.v.Proposed) {
			continue
		}
		d := int64(x.v.Micros) - sent.UnixMicro()
		if clock := fence.Token(x.v.Micros); x.v.Pending && (clock > p+span || p > clock+span) {
			q.lead.Store(d)
			continue
		}
		for {
			cur := q.lead.Load()
			if q.lead.CompareAndSwap(cur, cur+(d-cur)/4) {
				break
			}
		}
	}
}

// acquireMulti takes the names one after another, in sorted order, each as
// a TryLock would on a majority: the nodes cannot check several names in
// one step for a majority at once. A refused or failed attempt gives back
// what it took. A waiting call then listens on the wake channel of each
// name that refused, on every node, as a waiting Lock does (see lock),
// until leaveMulti.
func (q *quorum) acquireMulti(ctx context.Context, m *multiCall) (multiResult, error) {
	res, err := takeInOrder(ctx, q, m)
	if err != nil || res.blocked == nil || !m.waiting {
		return res, err
	}
	listening, _ := m.be.(map[string]bool)
	if listening == nil {
		listening = make(map[string]bool)
		m.be = listening
	}
	for _, i := range res.blocked {
		channel := wakeChannel(quorumOf(m.rs[i]).keys)
		if !listening[channel] {
			listening[channel] = true
			for _, w := range q.wakes {
				w.add(channel, m.wake)
			}
		}
	}
	return res, nil
}

// leaveMulti stops m's listening on the wake channels.
func (q *quorum) leaveMulti(m *multiCall) {
	listening, _ := m.be.(map[string]bool)
	for channel := range listening {
		for _, w := range q.wakes {
			w.remove(channel, m.wake)
		}
	}
}
