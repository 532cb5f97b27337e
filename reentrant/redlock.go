package reentrant

// Redlock: one Client over N independent Redis masters. docs/design.md,
// "Redlock", has the protocol and the argument for its tokens.

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewRedlock returns a Client that locks names on every one of nodes, N
// independent Redis masters (N odd, at least 3; each any go-redis client),
// with the API of one built by [New]: Lock, TryLock, Do, reentry through
// the lease's context, Unlock, Extend, renewal and loss through the lease's
// context.
//
// A lock is acquired when a majority of the nodes granted it within the
// lease's safe window (the TTL less the safety margin and a clock-drift
// allowance of 1% of the TTL plus 2 ms, counted from the moment the first
// request was sent); otherwise what was taken is released on every node.
// Its token is chosen by a two-phase quorum rule: one more than the highest
// counter the granting majority reported, and no lower than the latest of
// their clocks (TIME, in microseconds), raised on a majority before the
// lease is handed out. The counters keep tokens unique and increasing while
// no node forgets a write it acknowledged; the clocks keep them so when a
// node restarts empty (a restart without AOF forgets) and the nodes that
// remember are out of reach, as long as the nodes' clocks differ by less
// than a node takes to restart and never step back further (docs/safety.md,
// "Redlock").
//
// Waiting polls with a random delay: there is no wait queue and no handoff,
// so waiting is not fair. WithReplicaAck, WithTimeTokens (Redlock's tokens
// follow the clocks already, and its counters never expire),
// WithCounterIdleExpiry and WithHandoffTimeout make no sense here and are
// refused with ErrInvalid, as are fewer than 3 nodes, an even number of
// nodes, or a nil node.
func NewRedlock(nodes []redis.UniversalClient, opts ...Option) (*Client, error) {
	n := len(nodes)
	if n < 3 || n%2 == 0 {
		return nil, invalid("Redlock needs an odd number of nodes, at least 3, not %d", n)
	}
	for i, rdb := range nodes {
		if rdb == nil {
			return nil, invalid("nil Redis client for node %d", i)
		}
		if v := reflect.ValueOf(rdb); v.Kind() == reflect.Pointer && v.IsNil() {
			return nil, invalid("nil %T for node %d", rdb, i)
		}
	}
	cfg := defaults()
	cfg.redlock = true
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	switch {
	case cfg.ackReplicas > 0:
		return nil, invalid("WithReplicaAck does not apply to Redlock: its nodes are independent masters")
	case cfg.tokens.Time:
		return nil, invalid("WithTimeTokens does not apply to Redlock: its tokens follow the nodes' clocks already, and its counters never expire")
	case cfg.handoffSet:
		return nil, invalid("WithHandoffTimeout does not apply to Redlock: waiters poll, nothing is handed off")
	}
	// The notifier is never registered with: Redlock waiters poll.
	return build(nodes[0], &quorum{nodes: append([]redis.UniversalClient(nil), nodes...)}, cfg, true), nil
}

// quorum is a Redlock client's set of nodes.
type quorum struct {
	nodes []redis.UniversalClient
}

func (q *quorum) majority() int { return len(q.nodes)/2 + 1 }

// drift is Redlock's clock-drift allowance for a lease of ttl.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// nodeReply is one node's answer to a fanned-out call.
type nodeReply[T any] struct {
	i   int
	v   T
	err error
}

// fan runs f on every node at once, each bounded by d and by the client
// closing, and returns where their replies arrive (buffered: a reply nobody
// reads is dropped with its goroutine). Once the client is closed, f is not
// run and the node's reply is ErrClosed.
func fan[T any](c *Client, d time.Duration, f func(ctx context.Context, i int, rdb redis.UniversalClient) (T, error)) <-chan nodeReply[T] {
	nodes := c.rl.nodes
	out := make(chan nodeReply[T], len(nodes))
	for i, rdb := range nodes {
		if !c.goBackground(func() {
			ctx, cancel := context.WithTimeout(c.bg, d)
			defer cancel()
			v, err := f(ctx, i, rdb)
			out <- nodeReply[T]{i, v, err}
		}) {
			var zero T
			out <- nodeReply[T]{i, zero, ErrClosed}
		}
	}
	return out
}

// gather reads the replies of fan until decided says the outcome is known,
// every node answered, or ctx ends; it returns the replies it read, one per
// node (nil for those still out), and whether every node answered. A reply
// read after that goes to late, if not nil, in the background.
func gather[T any](c *Client, ctx context.Context, ch <-chan nodeReply[T], decided func(got []*nodeReply[T]) bool, late func(nodeReply[T])) ([]*nodeReply[T], bool) {
	got := make([]*nodeReply[T], len(c.rl.nodes))
	left := len(got)
read:
	for left > 0 && !decided(got) {
		select {
		case r := <-ch:
			got[r.i] = &r
			left--
		case <-ctx.Done():
			break read
		}
	}
	if left > 0 && late != nil {
		n := left
		c.goBackground(func() {
			for range n {
				late(<-ch)
			}
		})
	}
	return got, left == 0
}

// count returns how many replies in got satisfy ok.
func count[T any](got []*nodeReply[T], ok func(nodeReply[T]) bool) int {
	n := 0
	for _, r := range got {
		if r != nil && ok(*r) {
			n++
		}
	}
	return n
}

// askPolicies checks every node's eviction policy, waiting for the nodes at
// most a quarter of the TTL: any node that may evict fails the check; one
// that does not answer in time is not checked (this client checks once).
func (c *Client) askPolicies(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.lease.ttl/4)
	defer cancel()
	ch := fan(c, c.cfg.lease.ttl/4, func(ctx context.Context, _ int, rdb redis.UniversalClient) (struct{}, error) {
		return struct{}{}, policyOf(ctx, rdb)
	})
	got, _ := gather(c, ctx, ch, func([]*nodeReply[struct{}]) bool { return false }, nil)
	for _, r := range got {
		if r != nil && errors.Is(r.err, ErrEvictionPolicy) {
			return r.err
		}
	}
	return nil
}
