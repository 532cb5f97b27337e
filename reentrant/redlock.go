package reentrant

// Redlock: one Client over N independent Redis masters. docs/redlock.md
// has the protocol and the argument for its tokens.

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/scripts"
)

// NewRedlock returns a Client that locks names on a majority of nodes, N
// independent Redis masters (N odd, at least 3), with the API of one built
// by [New] except that waiting is not fair (there is no queue). A lease is
// handed out only once a majority granted the lock within its safe window
// (the TTL less the safety margin and a clock-drift allowance of TTL/100 +
// 2 ms), and its token is above every earlier one for the name, even when a
// node restarts empty, while node clocks differ by less than a node takes
// to restart and never step back. It fails with ErrInvalid for fewer than 3
// nodes, an even number, a nil node, a bad option, WithReplicaAck or
// WithStrictTokens. docs/redlock.md has the algorithm and its argument.
func NewRedlock(nodes []redis.UniversalClient, opts ...ClientOption) (_ *Client, err error) {
	defer func() { err = pkgErr("new redlock", err) }()
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
	case cfg.strict:
		return nil, invalid("WithStrictTokens does not apply to Redlock: its tokens follow the nodes' clocks, so that a node that restarts empty repeats none")
	case cfg.handoffSet:
		return nil, invalid("WithHandoffTimeout does not apply to Redlock: waiters poll, nothing is handed off")
	}
	for i, rdb := range nodes {
		if _, ok := rdb.(*redis.ClusterClient); ok {
			return nil, invalid("node %d is a Redis Cluster: Redlock's nodes are independent masters, each one server (a *redis.Client)", i)
		}
	}
	rejoin := cfg.lease.ttl + drift(cfg.lease.ttl)
	if cfg.rejoinSet {
		if cfg.rejoin < rejoin {
			return nil, invalid("rejoin delay %v is shorter than the TTL %v and its drift allowance %v", cfg.rejoin, cfg.lease.ttl, drift(cfg.lease.ttl))
		}
		rejoin = cfg.rejoin
	}
	c, _ := build(cfg)
	q := &quorum{c: c, nodes: append([]redis.UniversalClient(nil), nodes...), space: keyspace{prefix: cfg.prefix},
		node: scripts.Node{Joined: scripts.JoinedKey(cfg.prefix), Rejoin: rejoin}}
	q.lead.Store(initialLead.Microseconds())
	for _, rdb := range q.nodes {
		q.wakes = append(q.wakes, newWakes(c, rdb))
	}
	c.be = q
	c.watch = watchSends(nodes...)
	for _, rdb := range nodes {
		q.watches = append(q.watches, watchSends(rdb))
	}
	for _, rdb := range nodes {
		c.retries = c.retries || retries(rdb)
	}
	return c, nil
}

// quorum is the backend of a Client built by NewRedlock: every operation
// runs the single-node script on every node at once (fanOut) and is decided
// by a majority of their replies (collect). It sends nothing again: a
// node's failure is one vote, and the majority decides without it.
type quorum struct {
	c     *Client
	nodes []redis.UniversalClient
	wakes []*wakes // one per node, where its waiters hear of releases
	// watches tells, per node, an attempt that sent nothing there (the
	// node is down) from one that may have run.
	watches []*sendWatch
	space   keyspace // where the keys are: every node is one server
	// node is the join record's key and the rejoin delay: a node found
	// empty votes for nobody until every lease it may have granted has
	// run out (qacquire.lua).
	node scripts.Node
	// lead is what a proposed token adds to this host's clock, in µs
	// (propose): the nodes' offset from it plus a request's way there, so
	// that the proposal is near their clocks when it reaches them. It
	// starts at initialLead and follows the clocks the nodes reply
	// (learn).
	lead atomic.Int64
}

// initialLead is a quorum's first lead: a loopback or LAN request's way
// there, and the clocks' usual NTP agreement.
const initialLead = time.Millisecond

// quorumCall is a lock call on a Redlock: the call and its lock's keys.
type quorumCall struct {
	redisCall
	// attempted: an attempt was made, so the next takes a new level ID
	// (quorum.acquire).
	attempted bool
}

func (q *quorum) newCall(r call) *call {
	qc := new(quorumCall)
	return qc.init(r, q.space, qc)
}

// quorumOf returns the Redlock backend's state of r.
func quorumOf(r *call) *quorumCall { return r.be.(*quorumCall) }

// request is r's acquisition as the scripts see it: Redlock neither
// queues nor issues time tokens.
func request(r *call) scripts.Request { return requestOf(r, scripts.Tokens{}) }

func (q *quorum) majority() int { return len(q.nodes)/2 + 1 }

// drift is Redlock's clock-drift allowance for a lease of ttl.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// nodeReply is one node's answer to a fanned-out call.
type nodeReply[T any] struct {
	i   int
	v   T
	err error
}

// fanOut runs f on every node at once, each bounded by d and by the client
// closing, and returns where their replies arrive (buffered: a reply nobody
// reads is dropped with its goroutine). Once the client is closed, f is not
// run and the node's reply is ErrClosed.
func fanOut[T any](q *quorum, d time.Duration, f func(ctx context.Context, i int, rdb redis.UniversalClient) (T, error)) <-chan nodeReply[T] {
	return fanOutUnder(q, q.c.bg, d, f)
}

// fanOutUnder is fanOut with the node calls' contexts made from parent,
// which may end them first.
func fanOutUnder[T any](q *quorum, parent context.Context, d time.Duration, f func(ctx context.Context, i int, rdb redis.UniversalClient) (T, error)) <-chan nodeReply[T] {
	c := q.c
	out := make(chan nodeReply[T], len(q.nodes))
	for i, rdb := range q.nodes {
		if !c.goBackground(func() {
			ctx, cancel := context.WithTimeout(parent, d)
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

// collect reads the replies of fanOut until decided says the outcome is known,
// every node answered, or ctx ends; it returns the replies it read, one per
// node (nil for those still out), and whether every node answered. A reply
// read after that goes to late, if not nil, in the background.
func collect[T any](q *quorum, ctx context.Context, ch <-chan nodeReply[T], decided func(got []*nodeReply[T]) bool, late func(nodeReply[T])) ([]*nodeReply[T], bool) {
	return collectGrace(q, ctx, ch, decided, 0, late)
}

// collectGrace is collect that, once the outcome is known, still reads
// the replies that come within grace, as if they had come before: a node
// that answers a moment after the majority then costs no later command.
func collectGrace[T any](q *quorum, ctx context.Context, ch <-chan nodeReply[T], decided func(got []*nodeReply[T]) bool, grace time.Duration, late func(nodeReply[T])) ([]*nodeReply[T], bool) {
	got := make([]*nodeReply[T], len(q.nodes))
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
	if left > 0 && grace > 0 && ctx.Err() == nil {
		t := time.NewTimer(grace)
	wait:
		for left > 0 {
			select {
			case r := <-ch:
				got[r.i] = &r
				left--
			case <-t.C:
				break wait
			case <-ctx.Done():
				break wait
			}
		}
		t.Stop()
	}
	if left > 0 && late != nil {
		n := left
		q.c.goSettle(func() {
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

// ready checks every node's eviction policy, waiting for the nodes at most
// a quarter of the TTL: any node that may evict fails the check; one that
// does not answer in time is not checked (this client checks once).
func (q *quorum) ready(ctx context.Context) error {
	if noEvictionCheck(q.c.cfg) {
		return nil
	}
	d := q.c.cfg.lease.ttl / 4
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	ch := fanOut(q, d, func(ctx context.Context, _ int, rdb redis.UniversalClient) (struct{}, error) {
		return struct{}{}, policyOf(ctx, rdb)
	})
	got, _ := collect(q, ctx, ch, func([]*nodeReply[struct{}]) bool { return false }, nil)
	for _, r := range got {
		if r != nil && errors.Is(r.err, ErrEvictionPolicy) {
			return r.err
		}
	}
	return nil
}

// undo, undoInBackground and leave remove, in the background, the level
// and queue entry r's attempt may have taken on every node: a node that
// does not answer keeps them until the lease ends there. So undo never
// confirms the undo: its error says so.
func (q *quorum) undo(r *call) error {
	if !q.undoAll(r, request(r)) {
		return errors.New("the undo could not start: the client is closed")
	}
	return errors.New("the undo on every node goes on in the background")
}

func (q *quorum) undoInBackground(r *call) bool { return q.undoAll(r, request(r)) }

func (q *quorum) leave(r *call) error {
	q.undoAll(r, request(r))
	return nil
}

func (q *quorum) close() error {
	var errs []error
	for _, w := range q.wakes {
		errs = append(errs, w.close())
	}
	return join(errs...)
}
