package reentrant

// The Redis backends' side of Election: proclaim.lua.

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
)

// proclaimed is one node's answer to proclaim.lua.
type proclaimed struct {
	meta string
	held bool
}

// proclaimOn runs proclaim.lua's proclaim or stamp on rdb.
func proclaimOn(ctx context.Context, rdb redis.Scripter, k scripts.Keys, owner Owner, tok fence.Token, value string, stamp bool) (proclaimed, error) {
	if stamp {
		m, held, err := scripts.Stamp(ctx, rdb, k, tok)
		return proclaimed{m, held}, err
	}
	held, err := scripts.Proclaim(ctx, rdb, k, string(owner), tok, value)
	return proclaimed{held: held}, err
}

func (s *single) proclaim(ctx context.Context, ref lockRef, owner Owner, tok fence.Token, value string, stamp bool) (string, bool, error) {
	k := keysOf(ref, s.space)
	r, err := retryBusy(s, ctx, func(ctx context.Context) (proclaimed, error) {
		return proclaimOn(ctx, s.rdb, k, owner, tok, value, stamp)
	})
	return r.meta, r.held, err
}

// proclaim runs on every node and is decided by a majority: held when a
// majority say so, with the metadata of one of them.
func (q *quorum) proclaim(ctx context.Context, ref lockRef, owner Owner, tok fence.Token, value string, stamp bool) (string, bool, error) {
	maj, n, k := q.majority(), len(q.nodes), keysOf(ref, q.space)
	ch := fanOut(q, q.c.cfg.lease.ttl, func(ctx context.Context, _ int, rdb redis.UniversalClient) (proclaimed, error) {
		return proclaimOn(ctx, rdb, k, owner, tok, value, stamp)
	})
	yes := func(x nodeReply[proclaimed]) bool { return x.err == nil && x.v.held }
	no := func(x nodeReply[proclaimed]) bool { return x.err == nil && !x.v.held }
	got, _ := collect(q, ctx, ch, func(got []*nodeReply[proclaimed]) bool {
		return count(got, yes) >= maj || count(got, no) > n-maj
	}, nil)
	if count(got, yes) >= maj {
		for _, x := range got {
			if x != nil && yes(*x) {
				return x.v.meta, true, nil
			}
		}
	}
	if count(got, no) > n-maj {
		return "", false, nil
	}
	return "", false, join(fmt.Errorf("answered on %d of %d nodes, fewer than a majority", count(got, yes), n), ctxErr(ctx), nodeErrs(got))
}
