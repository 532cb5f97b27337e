package reentrant

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/lua"
)

// force runs force.lua for tok on every node. It reports the
// ownership ended when a majority ended it (or had already), and otherwise,
// once so many nodes say it does not hold the lock that no majority can,
// the holder a node reported (the highest).
func (q *quorum) force(ctx context.Context, k lua.Keys, tok fence.Token) (lua.ForceResult, error) {
	maj, n := q.majority(), len(q.nodes)
	ch := fanOut(q, q.c.cfg.lease.ttl, func(ctx context.Context, _ int, rdb redis.UniversalClient) (lua.ForceResult, error) {
		return lua.Force(ctx, rdb, k, tok, q.c.cfg.identity, lua.Tokens{})
	})
	yes := func(x nodeReply[lua.ForceResult]) bool { return x.err == nil && (x.v.Ended || x.v.Repeat) }
	no := func(x nodeReply[lua.ForceResult]) bool { return x.err == nil && !x.v.Ended && !x.v.Repeat }
	got, _ := collect(q, ctx, ch, func(got []*nodeReply[lua.ForceResult]) bool {
		return count(got, yes) >= maj || count(got, no) > n-maj
	}, nil)
	if count(got, yes) >= maj {
		q.published(k)
		return lua.ForceResult{Ended: true}, nil
	}
	if count(got, no) > n-maj {
		var r lua.ForceResult
		for _, x := range got {
			if x != nil && no(*x) {
				r.Holder = max(r.Holder, x.v.Holder)
			}
		}
		return r, nil
	}
	return lua.ForceResult{}, join(fmt.Errorf("forced on %d of %d nodes, fewer than a majority", count(got, yes), n), ctxErr(ctx), nodeErrs(got))
}
