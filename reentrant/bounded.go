package reentrant

// Calls to a backend, bounded by the caller's context.

import (
	"context"
	"time"
)

// result is what one call of a backend returned.
type result[T any] struct {
	v   T
	err error
}

// outcome is how a bounded call ended.
type outcome[T any] struct {
	v   T
	err error // the call's error, or ctx's when the call's result is unknown
	// ended: ctx ended before the call returned. The call's own v and err
	// are still there when it returned within the cleanup grace; otherwise
	// known is false and late gets them in the background.
	ended, known bool
}

// bounded runs f and returns its result, or gives up soon after ctx ends.
// A go-redis client built without ContextTimeoutEnabled ignores ctx's
// deadline on reads, and its retries can outlast it; a caller must not be
// held past its own deadline for that. When ctx ends first, bounded still
// waits up to grace for the call, so that a responsive server's answer is
// not thrown away; past that, f goes on in the background and late, if not
// nil, receives its result there.
//
// f runs inline, without a goroutine, when nothing is to be bounded: ctx
// never ends, or has no deadline (its cancellation is then noticed by
// go-redis between attempts and at its own timeouts), or the client honours
// the deadline itself (ContextTimeoutEnabled: its i/o timeout is the
// deadline). After Close nothing runs in the background, so f runs inline
// too.
func bounded[T any](c *Client, ctx context.Context, grace time.Duration, f func(context.Context) (T, error), late func(T, error)) outcome[T] {
	if c.inline(ctx) {
		v, err := f(ctx)
		return ranInline(ctx, v, err)
	}
	done := make(chan result[T], 1)
	if !c.goBackground(func() {
		v, err := f(ctx)
		done <- result[T]{v, err}
	}) {
		v, err := f(ctx)
		return outcome[T]{v: v, err: err, known: true}
	}
	select {
	case r := <-done:
		return outcome[T]{v: r.v, err: r.err, ended: ctxErr(ctx) != nil, known: true}
	case <-ctx.Done():
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case r := <-done:
		return outcome[T]{v: r.v, err: r.err, ended: true, known: true}
	case <-t.C:
	}
	if late != nil {
		// late settles what the call may have left (an undo): it still
		// runs while Close waits for such work, and not after.
		c.goSettle(func() {
			r := <-done
			late(r.v, r.err)
		})
	}
	return outcome[T]{err: ctxErr(ctx), ended: true}
}

// ranInline is the outcome of a call that bounded ran, or would have run,
// inline. The hot paths (acquire, release) call f themselves when
// c.inline(ctx), so that f, which bounded may hand to a goroutine, is not
// allocated on the heap for every call.
func ranInline[T any](ctx context.Context, v T, err error) outcome[T] {
	return outcome[T]{v: v, err: err, ended: ctx.Done() != nil && ctxErr(ctx) != nil, known: true}
}

// inline reports whether bounded runs a call under ctx on the caller's
// goroutine: ctx has no deadline to keep, or the client keeps it itself.
func (c *Client) inline(ctx context.Context) bool {
	_, deadline := ctx.Deadline()
	return !deadline || c.deadlines
}

// ctxErr is ctx.Err, also in the instant after ctx's deadline passed and
// before ctx.Err reports it: go-redis puts the deadline on the socket, so
// its i/o timeout can arrive first, and the caller must still be able to
// tell that its deadline, not Redis, ended the call.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}
