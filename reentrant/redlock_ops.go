package reentrant

// Redlock's Unlock, Extend, renewal and Inspect: the single-node scripts on
// every node, decided by a majority.

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
)

// release runs release.lua on every node. It returns the depth left
// that a majority confirmed (the highest of theirs), -1 when so many nodes
// say the ownership is gone that no majority can confirm (free when so
// many of those say the name is free and untaken since that no majority
// can hold it; forced when one says a forced unlock ended it), or an
// error when neither is known by the time ctx ends. Nodes that answer
// later still release their level; one that never answers lets it expire.
func (q *quorum) release(ctx context.Context, ref lockRef, owner Owner, tok fence.Token, level string) (released, error) {
	maj, n, k := q.majority(), len(q.nodes), keysOf(ref, q.space)
	// Each node that frees the lock tells the waiters listening on it, in
	// the release's own script: no command of its own.
	wake := wakeChannel(k)
	ch := fanOut(q, q.c.cfg.lease.ttl, func(ctx context.Context, _ int, rdb redis.UniversalClient) (scripts.Released, error) {
		r, err := scripts.ReleaseWaking(ctx, rdb, k, string(owner), tok, level, scripts.Tokens{}, wake)
		if err == nil && r.Depth < 0 && r.Forced == nil {
			// A node whose phase 2 never landed holds the level pending:
			// raised to the token first, it remembers the token too; then
			// the level goes. No level there may mean the grant is still
			// in flight: it is not undone (which could free the node with
			// its old counter), the acquisition's late handler raises and
			// releases it when it lands.
			if ok, _ := scripts.QRaise(ctx, rdb, k, string(owner), level, tok, false); ok {
				return scripts.ReleaseWaking(ctx, rdb, k, string(owner), tok, level, scripts.Tokens{}, wake)
			}
			// A free node the grant never reached (it failed there, or
			// the node restarted) learns the token, so that a later
			// majority including it cannot issue the token again.
			if bumped, _ := scripts.QBump(ctx, rdb, k, tok); bumped {
				return r, err
			}
			// Held: by the level, landed since the raise (raised now and
			// released), or by a level the raise refuses, on a node whose
			// counter is at or above the token already (it refused the
			// acquisition's proposal), which goes, so that the node is not
			// held until the lease's end; or by another owner.
			if ok, _ := scripts.QRaise(ctx, rdb, k, string(owner), level, tok, false); ok {
				return scripts.ReleaseWaking(ctx, rdb, k, string(owner), tok, level, scripts.Tokens{}, wake)
			}
			_, _ = scripts.Abandon(ctx, rdb, k, &scripts.Request{Owner: string(owner), Level: level})
		}
		return r, err
	})
	yes := func(x nodeReply[scripts.Released]) bool { return x.err == nil && x.v.Depth >= 0 }
	gone := func(x nodeReply[scripts.Released]) bool { return x.err == nil && x.v.Depth < 0 }
	free := func(x nodeReply[scripts.Released]) bool { return gone(x) && x.v.Free }
	got, _ := collect(q, ctx, ch, func(got []*nodeReply[scripts.Released]) bool {
		return count(got, yes) >= maj || count(got, gone) > n-maj
	}, nil)
	if count(got, yes) >= maj {
		left := int64(0)
		for _, x := range got {
			if x != nil && yes(*x) {
				left = max(left, x.v.Depth)
			}
		}
		return released{left: left}, nil
	}
	if count(got, gone) > n-maj {
		r := released{left: -1, free: count(got, free) > n-maj}
		for _, x := range got {
			if x != nil && gone(*x) && x.v.Forced != nil {
				r.forced = forcedOf(x.v.Forced)
			}
		}
		return r, nil
	}
	return released{}, join(fmt.Errorf("released on %d of %d nodes, fewer than a majority", count(got, yes), n), ctxErr(ctx), nodeErrs(got))
}

// extend runs extend.lua on every node and reports whether a majority
// extended the ownership; sent is when the requests left.
func (q *quorum) extend(ctx context.Context, req *extendReq) extendResult {
	held, sent, err := q.extendOnce(ctx, req)
	return extendResult{held: held, sent: sent, err: err}
}

func (q *quorum) extendOnce(ctx context.Context, req *extendReq) (bool, time.Time, error) {
	maj, n, k := q.majority(), len(q.nodes), keysOf(req.ref, q.space)
	owner, tok, ttl := req.owner, req.token, req.ttl
	sent := time.Now()
	ch := fanOut(q, ttl, func(ctx context.Context, _ int, rdb redis.UniversalClient) (bool, error) {
		return scripts.Extend(ctx, rdb, k, string(owner), tok, ttl)
	})
	yes := func(x nodeReply[bool]) bool { return x.err == nil && x.v }
	no := func(x nodeReply[bool]) bool { return x.err == nil && !x.v }
	got, _ := collect(q, ctx, ch, func(got []*nodeReply[bool]) bool {
		return count(got, yes) >= maj || count(got, no) > n-maj
	}, nil)
	switch {
	case count(got, yes) >= maj:
		return true, sent, nil
	case count(got, no) > n-maj:
		return false, sent, nil
	}
	return false, sent, join(fmt.Errorf("extended on %d of %d nodes, fewer than a majority", count(got, yes), n), ctxErr(ctx), nodeErrs(got))
}

// extendBatch is scripts.ExtendBatch on a Redlock: one pipeline per node,
// all at once; each ownership is held when a majority extended it, lost when
// so many nodes say it is gone that no majority can, and an error otherwise.
// Sent is when the first pipeline left, before any node could extend.
func (q *quorum) extendBatch(ctx context.Context, reqs []*extendReq) []extendResult {
	maj, n := q.majority(), len(q.nodes)
	sreqs := prepared(reqs, q.space)
	sent := time.Now()
	ch := fanOut(q, time.Until(deadlineOr(ctx, sent.Add(time.Second))), func(ctx context.Context, _ int, rdb redis.UniversalClient) ([]scripts.ExtendResult, error) {
		return scripts.ExtendBatch(ctx, rdb, sreqs), nil
	})
	yes := make([]int, len(reqs))
	no := make([]int, len(reqs))
	errs := make([]error, len(reqs))
	done := func() bool {
		for i := range reqs {
			if yes[i] < maj && no[i] <= n-maj {
				return false
			}
		}
		return true
	}
read:
	for left := n; left > 0 && !done(); left-- {
		var x nodeReply[[]scripts.ExtendResult]
		select {
		case x = <-ch:
		case <-ctx.Done():
			break read
		}
		if x.err != nil {
			for i := range reqs {
				errs[i] = x.err
			}
			continue
		}
		for i, r := range x.v {
			switch {
			case r.Err != nil:
				errs[i] = fmt.Errorf("node %d: %w", x.i, r.Err)
			case r.Held:
				yes[i]++
			default:
				no[i]++
			}
		}
	}
	out := make([]extendResult, len(reqs))
	for i := range reqs {
		switch {
		case yes[i] >= maj:
			out[i] = extendResult{held: true, sent: sent}
		case no[i] > n-maj:
			out[i] = extendResult{sent: sent}
		default:
			out[i] = extendResult{sent: sent, err: join(fmt.Errorf("extended on %d of %d nodes", yes[i], n), errs[i], ctxErr(ctx))}
		}
	}
	return out
}

// deadlineOr returns ctx's deadline, or d when it has none.
func deadlineOr(ctx context.Context, d time.Time) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return d
}

// agreedMeta returns the metadata of the nodes holding (owner, tok) that
// is the newest election value (the highest proclaim count: see
// parseElectionMeta), then the one most of them have, then the least in
// byte order: the same whichever nodes answered first, and never a value
// a Proclaim replaced on the nodes that answered.
func agreedMeta(got []*nodeReply[scripts.State], owner string, tok fence.Token) string {
	n := map[string]int{}
	for _, x := range got {
		if x != nil && x.err == nil && x.v.Held && x.v.Owner == owner && x.v.Token == tok {
			n[x.v.Meta]++
		}
	}
	best, most, seq := "", 0, int64(-1)
	for m, c := range n {
		s := int64(-1)
		if e := parseElectionMeta(m); e.ok {
			s = e.seq
		}
		if s > seq || s == seq && (c > most || c == most && m < best) {
			best, most, seq = m, c, s
		}
	}
	return best
}

// inspect reads the lock on every node. When a majority agree on a
// holder (owner and token), that is the state, with the shortest TTL among
// them and the deepest hold; otherwise the lock is reported free, with the
// highest counter a node reported. Meta comes from the agreeing nodes.
func (q *quorum) inspect(ctx context.Context, ref lockRef) (State, error) {
	maj, n, k := q.majority(), len(q.nodes), keysOf(ref, q.space)
	ch := fanOut(q, q.c.cfg.lease.ttl, func(ctx context.Context, _ int, rdb redis.UniversalClient) (scripts.State, error) {
		return scripts.Inspect(ctx, rdb, k)
	})
	// Done once a majority agree on a holder, or on the lock being free:
	// a stopped node is not waited for.
	got, _ := collect(q, ctx, ch, func(got []*nodeReply[scripts.State]) bool {
		votes := map[[2]string]int{}
		for _, x := range got {
			if x != nil && x.err == nil {
				k := [2]string{x.v.Owner, x.v.Token.String()}
				if votes[k]++; votes[k] >= maj {
					return true
				}
			}
		}
		return false
	}, nil)
	type holder struct {
		owner string
		tok   fence.Token
	}
	votes := map[holder]int{}
	var last fence.Token
	answered := 0
	for _, x := range got {
		if x == nil || x.err != nil {
			continue
		}
		answered++
		last = max(last, x.v.Counter)
		if x.v.Held {
			votes[holder{x.v.Owner, x.v.Token}]++
		}
	}
	if answered < maj {
		return State{}, join(fmt.Errorf("%d of %d nodes answered, fewer than a majority", answered, n), ctxErr(ctx), nodeErrs(got))
	}
	for h, v := range votes {
		if v < maj {
			continue
		}
		var st scripts.State
		for _, x := range got {
			if x == nil || x.err != nil || !x.v.Held || x.v.Owner != h.owner || x.v.Token != h.tok {
				continue
			}
			switch {
			case st.Owner == "":
				st = x.v
			case x.v.TTL < st.TTL:
				st.TTL = x.v.TTL
			}
			if x.v.Depth > st.Depth {
				st.Depth, st.Levels = x.v.Depth, x.v.Levels
			}
		}
		st.Meta = agreedMeta(got, h.owner, h.tok)
		st.Counter = max(st.Counter, last)
		return stateOf(st, false), nil
	}
	return State{Name: firstState(got).Name, LastToken: last}, nil
}

// firstState returns the first state a node answered, for the lock's name.
func firstState(got []*nodeReply[scripts.State]) scripts.State {
	for _, x := range got {
		if x != nil && x.err == nil {
			return x.v
		}
	}
	return scripts.State{}
}

// nodeErrs joins the errors of the nodes that failed.
func nodeErrs[T any](got []*nodeReply[T]) error {
	var errs nodeErrors
	for i, x := range got {
		if x != nil && x.err != nil && x.err != errSkipped {
			errs.add(i, x.err)
		}
	}
	return errs.err()
}

// force runs force.lua for tok on every node. It reports the
// ownership ended when a majority ended it (or had already), and otherwise,
// once so many nodes say it does not hold the lock that no majority can,
// the holder a node reported (the highest).
func (q *quorum) force(ctx context.Context, ref lockRef, tok fence.Token) (forceResult, error) {
	maj, n, k := q.majority(), len(q.nodes), keysOf(ref, q.space)
	ch := fanOut(q, q.c.cfg.lease.ttl, func(ctx context.Context, _ int, rdb redis.UniversalClient) (scripts.ForceResult, error) {
		return scripts.Force(ctx, rdb, k, tok, q.c.cfg.identity, scripts.Tokens{})
	})
	yes := func(x nodeReply[scripts.ForceResult]) bool { return x.err == nil && (x.v.Ended || x.v.Repeat) }
	no := func(x nodeReply[scripts.ForceResult]) bool { return x.err == nil && !x.v.Ended && !x.v.Repeat }
	got, _ := collect(q, ctx, ch, func(got []*nodeReply[scripts.ForceResult]) bool {
		return count(got, yes) >= maj || count(got, no) > n-maj
	}, nil)
	if count(got, yes) >= maj {
		published(q, k, got, yes)
		return forceResult{ended: true}, nil
	}
	if count(got, no) > n-maj {
		var r forceResult
		for _, x := range got {
			if x != nil && no(*x) {
				r.holder = max(r.holder, x.v.Holder)
			}
		}
		return r, nil
	}
	return forceResult{}, join(fmt.Errorf("forced on %d of %d nodes, fewer than a majority", count(got, yes), n), ctxErr(ctx), nodeErrs(got))
}
