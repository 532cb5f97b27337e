package scripts

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Batched is a go-redis client whose script calls share round trips:
// while leaders calls are in flight, a further call waits, and the next
// call to finish sends every waiting call with its successor in one
// pipeline. A call made while fewer are in flight goes out at once, on
// its own, as through the client (so an uncontended caller pays nothing
// for it); under many concurrent callers the server reads and answers a
// whole batch per read and write, which is where most of a short script's
// cost lies (docs/decisions.md).
//
// A call through Batched has the semantics of the client's Process with
// ContextTimeoutEnabled off: once sent, it returns when its reply came or
// the client's own timeouts and retries gave up, whatever its context
// says (a caller that must return at a deadline waits in a goroutine of
// its own, as the lock client's bounded does); like the client, it does
// not send a command whose context is done by the time it would leave,
// and fails it with the context's error. Each command keeps its own
// reply or error; a pipeline's network error is every command's error,
// and a retry by go-redis re-sends the whole pipeline (the scripts
// recognise their own repeats). Use it only for a client that does not
// enforce contexts: a batch runs under its leader's context values, not
// its deadline.
type Batched struct {
	*redis.Client
	b *batcher
}

// Batch returns rdb with its calls batched, at most leaders of them, or
// batches, in flight at once (at least 1).
func Batch(rdb *redis.Client, leaders int) Batched {
	return Batched{rdb, &batcher{rdb: rdb, max: max(leaders, 1)}}
}

// Process sends cmd, alone when fewer than the limit are in flight, else
// in the next batch.
func (b Batched) Process(ctx context.Context, cmd redis.Cmder) error {
	b.b.process(ctx, cmd)
	return cmd.Err()
}

// batcher keeps the calls waiting for a batch. Its invariant: calls wait
// only while max calls lead (are in flight), so there is always a leader to
// take them; each leader, when its round trip is over, makes the oldest
// waiting call the next leader, or, with none waiting, leaves.
type batcher struct {
	rdb *redis.Client
	max int

	mu      sync.Mutex
	leaders int
	waiting []*batchCall
}

// batchCall is a call that waits: its wake receives false when a leader
// has sent it and its reply is in (or found its context done before
// sending it), true when it is to lead.
type batchCall struct {
	ctx  context.Context
	cmd  redis.Cmder
	wake chan bool
}

var batchCalls = sync.Pool{New: func() any { return &batchCall{wake: make(chan bool, 1)} }}

func (b *batcher) process(ctx context.Context, cmd redis.Cmder) {
	b.mu.Lock()
	if b.leaders < b.max {
		// Nobody waits (the invariant): cmd goes out alone, as through
		// the client.
		b.leaders++
		b.mu.Unlock()
		// Deferred, as the other waits below: a hook that panics, and a
		// caller that recovers, must not leave the calls waiting for good.
		defer b.handOn()
		_ = b.rdb.Process(ctx, cmd)
		return
	}
	w := batchCalls.Get().(*batchCall)
	w.ctx, w.cmd = ctx, cmd
	b.waiting = append(b.waiting, w)
	b.mu.Unlock()
	if <-w.wake {
		b.lead(w)
	}
	w.ctx, w.cmd = nil, nil
	batchCalls.Put(w)
}

// lead sends the call w, which waited and is now to lead, with every call
// that waits now, in one pipeline, wakes them, and hands on the lead. As
// the client does before it sends a command, it does not send one whose
// context is done: that call fails with its context's error.
func (b *batcher) lead(w *batchCall) {
	b.mu.Lock()
	batch := append(b.waiting, w)
	b.waiting = nil
	b.mu.Unlock()
	defer func() {
		for _, c := range batch[:len(batch)-1] {
			c.wake <- false
		}
		b.handOn()
	}()
	pipe := b.rdb.Pipeline()
	var last *batchCall
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd.SetErr(err)
		} else {
			_ = pipe.Process(c.ctx, c.cmd)
			last = c
		}
	}
	switch pipe.Len() {
	case 0:
	case 1:
		_ = b.rdb.Process(last.ctx, last.cmd)
	default:
		// Each command gets its reply or error; Exec's is the first of
		// them. No caller's cancellation may cut the others' round trip.
		_, _ = pipe.Exec(context.WithoutCancel(w.ctx))
	}
}

// handOn ends a leader's turn: the oldest call that waits leads next, or
// with none waiting, there is one leader fewer.
func (b *batcher) handOn() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.waiting) > 0 {
		next := b.waiting[0]
		b.waiting = b.waiting[1:]
		next.wake <- true
		return
	}
	b.leaders--
}
