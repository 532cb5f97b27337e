package reentrant

import "context"

// checkPolicy refuses, before the first acquisition, a deployment that
// cannot keep tokens increasing (the backend's ready: a server whose
// maxmemory-policy may evict the fencing counter, which only a client with
// WithStrictTokens must check, unless withEvictionAllowed). A failure to ask (the
// network) is returned and the check runs again on the next call; once it
// passed, it is not made again.
func (c *Client) checkPolicy(ctx context.Context) error {
	if c.checked.Load() {
		return nil
	}
	out := bounded(c, ctx, cleanupBudget/2, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, c.be.ready(ctx)
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
