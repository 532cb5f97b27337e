package reentrant

// Leader election with terms, on one lock name.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redfence/redfence/fence"
)

// ErrNoLeader reports an election with no leader: nobody holds its name.
var ErrNoLeader = errors.New("no leader")

// maxElectionValueLen is the longest value Campaign and Proclaim accept, in
// bytes: the metadata a term is stored in (maxMetadataLen) less room for
// the rest of it, "<mark><since> <seq> ": the mark byte, when the term
// began (13 digits of ms), the count of its proclaims (16 digits at most)
// and the spaces.
const maxElectionValueLen = maxMetadataLen - 32

// election is the leader election on one name, the lock of that name: a
// candidate that campaigns takes the lock and holds it for its term.
type election struct {
	c    *Client
	name string
	opts []CallOption
}

// Leader is an election's leader, as Leader and ObserveLeader read it: the value
// it campaigned with or proclaimed since, its term's token, and when the
// term began on the Redis server's clock (to the millisecond, at most a
// round trip after the grant; with NewRedlock the token's time; zero for a
// holder that did not campaign).
type Leader struct {
	Value string
	Token fence.Token
	Since time.Time
}

// election returns the election named name, whose campaigns lock with opts.
func (c *Client) election(name string, opts []CallOption) *election {
	return &election{c: c, name: name, opts: append([]CallOption(nil), opts...)}
}

// Campaign waits until this candidate leads the election named name, and
// returns its Term. An election is the lock of its name, held for a term
// with the lease rules of Lock and one fencing token per term, which the
// leader passes with its writes so that a deposed leader cannot overwrite
// its successor. Campaign waits as Lock does (fairly, except on a
// Redlock), bounded by ctx; opts apply as to Lock (NoRetry makes it a try).
// Each call is a candidate of its own (a fresh owner), whatever ctx
// carries; value is what Leader and ObserveLeader report. It returns
// ErrInvalid for a bad name, value (more than 224 bytes, or not UTF-8
// without control characters) or option, or for a ctx of a term of this
// election that this client holds (a candidate never waits for itself);
// ErrNotAcquired (with the context's error) when ctx ends first or another
// leads and the strategy gives up; ErrOutcomeUnknown as Lock; ErrClosed;
// Redis errors. A campaign that fails leaves nothing held or queued once
// its undo is done.
func (c *Client) Campaign(ctx context.Context, name, value string, opts ...CallOption) (*Term, error) {
	return c.election(name, opts).campaign(ctx, value, false)
}

// Leader reads the leader of the election named name: its value, token and
// the start of its term. It returns ErrNoLeader when nobody holds the name,
// ErrInvalid for a bad name, ErrClosed after Close, and Redis errors.
func (c *Client) Leader(ctx context.Context, name string) (Leader, error) {
	return c.election(name, nil).Leader(ctx)
}

// ObserveLeader reports the leader of the election named name after each
// change: a new term, a Proclaim, or no leader (the zero Leader). It reads
// every 100 ms, so changes closer together may be merged, but a leader is
// never reported after a newer one; a slow reader gets the latest state,
// not a backlog. The first state is sent at once. The channel is closed
// when ctx ends or the client closes; read errors are retried.
func (c *Client) ObserveLeader(ctx context.Context, name string) <-chan Leader {
	return c.election(name, nil).Observe(ctx)
}

// Term is one campaign's win: a term of leadership, held until Resign,
// the client's Close or the loss of its Lease, whose Token (one per term,
// higher than every earlier term's, kept by renewals and Proclaim), Context
// and Err are the term's: its context ends with ErrReleased after Resign,
// and with ErrLost and why otherwise. End a term with Resign.
type Term struct {
	*Lease // the lease the term holds the election's name with
	e      *election
}

// electionMark starts an election term's metadata: a control character,
// which WithMetadata refuses, so that no plain lock's metadata reads as a
// term ("12 3 job" would otherwise be a term stamped at 12 ms).
const electionMark = "\x1d"

// electionMeta is the metadata of a fresh term with value:
// "<mark><since> <seq> <value>", since "0" until stamped, seq the number of
// proclaims (proclaim.lua).
func electionMeta(value string) string { return electionMark + "0 0 " + value }

// electionMetaOf is a term's metadata, split; ok false for metadata that
// is not an election's.
type electionMetaOf struct {
	since time.Time // zero until stamped
	seq   int64
	value string
	ok    bool
}

func parseElectionMeta(m string) electionMetaOf {
	term, marked := strings.CutPrefix(m, electionMark)
	s, rest, found1 := strings.Cut(term, " ")
	q, v, found2 := strings.Cut(rest, " ")
	ms, err1 := strconv.ParseInt(s, 10, 64)
	seq, err2 := strconv.ParseInt(q, 10, 64)
	if !marked || !found1 || !found2 || err1 != nil || err2 != nil || ms < 0 || seq < 0 {
		return electionMetaOf{value: m}
	}
	out := electionMetaOf{seq: seq, value: v, ok: true}
	if ms > 0 {
		out.since = time.UnixMilli(ms)
	}
	return out
}

// shownMeta is metadata as Inspect and List report it: a term's value
// alone (Leader reports its start), any other metadata as it is.
func shownMeta(m string) string { return parseElectionMeta(m).value }

// termMetadata sets a campaign's metadata, which carries the mark that
// WithMetadata would refuse; its value was checked (checkElectionValue).
func termMetadata(m string) CallOption {
	return callOption(func(l *leaseConfig) error {
		l.meta = m
		return nil
	})
}

func checkElectionValue(v string) error { return checkText("election value", v, maxElectionValueLen) }

// Campaign is Client.Campaign of e.
func (e *election) Campaign(ctx context.Context, value string) (*Term, error) {
	return e.campaign(ctx, value, false)
}

func (e *election) campaign(ctx context.Context, value string, try bool) (*Term, error) {
	op := "campaign"
	if err := e.c.valid(); err != nil {
		return nil, opErr(op, e.name, err)
	}
	if err := checkElectionValue(value); err != nil {
		return nil, opErr(op, e.name, err)
	}
	if ctx == nil {
		return nil, opErr(op, e.name, invalid("nil context"))
	}
	if o, ok := OwnerFrom(ctx); ok && e.c.holdsFor(o, e.name) {
		// A term's own context: a campaign is a candidate of its own,
		// which would only wait for that term to end.
		return nil, opErr(op, e.name, invalid("the context is a term's of this election, which leads already: campaign from another context"))
	}
	ctx = WithOwner(ctx, NewOwner())
	opts := append(append([]CallOption(nil), e.opts...), termMetadata(electionMeta(value)))
	var l *Lease
	var err error
	if try {
		l, err = e.c.TryLock(ctx, e.name, opts...)
	} else {
		l, err = e.c.Lock(ctx, e.name, opts...)
	}
	if err != nil {
		return nil, opErr(op, e.name, bare(err))
	}
	if !e.c.cfg.redlock {
		// The term's start, on the server's clock, now that it began;
		// bounded as any call. A failure leaves it to the first reader
		// (Leader, Observe).
		_ = bounded(e.c, ctx, cleanupBudget/2, func(ctx context.Context) (bool, error) {
			_, held, err := e.c.be.proclaim(ctx, l.ref, "", l.token, "", true)
			return held, err
		}, nil)
	}
	if err := l.Err(); err != nil {
		_ = l.Unlock(context.WithoutCancel(ctx)) // free what Redis may still hold
		return nil, opErr(op, e.name, bare(err))
	}
	return &Term{Lease: l, e: e}, nil
}

// Proclaim makes value the leader's value, keeping the term's token and
// start, while this term holds. It returns ErrNotHeld once the term ended,
// or when Redis says it no longer holds (the term then ends, with ErrGone),
// ErrInvalid for a bad value, and Redis errors; it never touches another
// term.
func (t *Term) Proclaim(ctx context.Context, value string) error {
	const op = "proclaim"
	name := t.e.name
	if err := checkElectionValue(value); err != nil {
		return opErr(op, name, err)
	}
	if err := t.e.c.ready(ctx, name); err != nil {
		return opErr(op, name, err)
	}
	if t.Lease.Err() != nil {
		return opErr(op, name, ErrNotHeld)
	}
	l := t.Lease
	out := bounded(t.e.c, ctx, cleanupBudget/2, func(ctx context.Context) (bool, error) {
		_, held, err := t.e.c.be.proclaim(ctx, l.ref, l.owner, l.token, value, false)
		return held, err
	}, nil)
	switch {
	case out.err != nil:
		return opErr(op, name, out.err)
	case !out.v:
		return opErr(op, name, l.goneFromRedis(nil))
	}
	return nil
}

// Resign ends the term: the election's next candidate may win. It is
// idempotent: once the term was resigned it returns nil and sends nothing;
// a term lost or closed is released in Redis too (Redis may still hold it
// for the safety margin, or, after Close, for its TTL), and nil returned.
// It never touches a successor's term: the release is of this term's
// ownership only (owner and token). A failed attempt (Redis unreachable,
// ctx ended) returns the error, ErrOutcomeUnknown when the release was
// sent and no reply came, and may be repeated.
func (t *Term) Resign(ctx context.Context) error {
	if errors.Is(t.Lease.Err(), ErrReleased) {
		return nil
	}
	err := t.Lease.Unlock(ctx)
	if err == nil || errors.Is(err, ErrNotHeld) {
		return nil // released now, or earlier, or gone from Redis already
	}
	return opErr("resign", t.e.name, bare(err))
}

// Leader is Client.Leader of e.
func (e *election) Leader(ctx context.Context) (Leader, error) {
	ld, err := e.leader(ctx)
	return ld, opErr("leader", e.name, err)
}

func (e *election) leader(ctx context.Context) (Leader, error) {
	if err := e.c.ready(ctx, e.name); err != nil {
		return Leader{}, err
	}
	st, err := e.c.inspect(ctx, e.name)
	if err != nil {
		return Leader{}, err
	}
	if !st.Held {
		return Leader{}, ErrNoLeader
	}
	m := parseElectionMeta(st.Meta)
	switch {
	case !m.ok:
		return Leader{Value: st.Meta, Token: st.Token}, nil
	case e.c.cfg.redlock:
		// A Redlock token is the term's start on its majority's clocks,
		// in µs (within 5 ms of each: docs/redlock.md), the same
		// whichever nodes answer; each node's own stamp would not be.
		return Leader{Value: m.value, Token: st.Token, Since: time.UnixMilli(int64(st.Token) / 1000)}, nil
	case m.since.IsZero():
		// The term began, and its campaign has not stamped it yet: the
		// first reader does. A reader that may not write (an ACL) reports
		// no start rather than fail.
		out := bounded(e.c, ctx, cleanupBudget/2, func(ctx context.Context) (proclaimed, error) {
			meta, held, err := e.c.be.proclaim(ctx, lockRef{name: e.name}, "", st.Token, "", true)
			return proclaimed{meta, held}, err
		}, nil)
		switch {
		case out.err != nil && ctx.Err() != nil:
			return Leader{}, out.err
		case out.err != nil:
		case !out.v.held:
			return e.leader(ctx) // that term ended meanwhile: read again
		default:
			m = parseElectionMeta(out.v.meta)
		}
	}
	return Leader{Value: m.value, Token: st.Token, Since: m.since}, nil
}

// observeEvery is how often Observe reads the leader.
const observeEvery = 100 * time.Millisecond

// Observe is Client.ObserveLeader of e.
func (e *election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader, 1)
	if ctx == nil || e.c.valid() != nil {
		close(ch)
		return ch
	}
	// The reads end with the client too: Close waits for this goroutine.
	ctx, cancel := context.WithCancel(ctx)
	var last Leader
	var highest fence.Token // of every term reported
	first := true
	send := func(ld Leader) {
		if !first && ld == last {
			return
		}
		if ld.Token != fence.None && ld.Token < highest {
			return // a term older than one reported: a stale read
		}
		first, last, highest = false, ld, max(highest, ld.Token)
		select {
		case <-ch: // drop the unread older state: the latest wins
		default:
		}
		ch <- ld
	}
	if !e.c.goBackground(func() {
		defer close(ch)
		defer cancel()
		stop := context.AfterFunc(e.c.bg, cancel)
		defer stop()
		tick := time.NewTicker(observeEvery)
		defer tick.Stop()
		for {
			ld, err := e.leader(ctx)
			switch {
			case err == nil:
				send(ld)
			case errors.Is(err, ErrNoLeader):
				send(Leader{})
			case errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalid) || ctx.Err() != nil:
				return
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}) {
		cancel()
		close(ch)
	}
	return ch
}
