package reentrant

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// evicting lists the maxmemory policies that may evict keys without a TTL,
// such as the fencing counter. An evicted counter starts again at 1, and
// every fenced store that remembers a higher token then refuses the new
// holders. The volatile-* policies evict only keys with a TTL (a lock hash
// whose holder then loses it, which fencing covers), and noeviction none.
var evicting = map[string]bool{"allkeys-lru": true, "allkeys-lfu": true, "allkeys-random": true}

// checkPolicy refuses, before the first acquisition, a server whose
// maxmemory-policy may evict the fencing counter, unless WithEvictionAllowed
// says to accept that. On Cluster every primary is asked. A failure to ask
// (the network) is returned and the check runs again on the next call.
//
// With WithTimeTokens there is nothing to check: an evicted counter is a
// lost counter, and the next token comes from the server's clock, above
// every earlier one unless that clock stepped back; the counter carries a
// TTL then anyway, so volatile-* policies may evict it too.
func (c *Client) checkPolicy(ctx context.Context) error {
	if c.cfg.allowEviction || c.cfg.timeTokens || c.checked.Load() {
		return nil
	}
	out := bounded(c, ctx, CleanupBudget/2, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, c.be.askPolicy(ctx)
	}, nil)
	if out.err != nil {
		if out.ended {
			return join(ErrNotAcquired, out.err)
		}
		return out.err
	}
	c.checked.Store(true)
	return nil
}

// policyOf reads one server's policy with CONFIG GET, or from INFO where
// CONFIG is renamed or forbidden. A server that reports no policy through
// either (a Redis-compatible server without maxmemory, such as miniredis)
// is taken as one that does not evict.
func policyOf(ctx context.Context, rdb redis.Cmdable) error {
	policy, err := configPolicy(ctx, rdb)
	if err != nil {
		return err
	}
	if evicting[policy] {
		return fmt.Errorf("%w: maxmemory-policy is %s, which may evict the fencing counter and restart tokens at 1; "+
			"use noeviction or a volatile-* policy, or accept the risk with WithEvictionAllowed", ErrEvictionPolicy, policy)
	}
	return nil
}

func configPolicy(ctx context.Context, rdb redis.Cmdable) (string, error) {
	m, cerr := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if cerr == nil && m["maxmemory-policy"] != "" {
		return m["maxmemory-policy"], nil
	}
	if cerr != nil && !isReply(cerr) {
		return "", fmt.Errorf("reading the server's maxmemory-policy: %w", cerr)
	}
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		if isReply(err) {
			return "", nil
		}
		return "", fmt.Errorf("reading the server's maxmemory-policy: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok {
			return v, nil
		}
	}
	return "", nil
}
