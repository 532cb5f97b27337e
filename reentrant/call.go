package reentrant

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/lua"
)

// result is what one Redis call returned.
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
// After Close nothing runs in the background, so f runs inline.
func bounded[T any](c *Client, ctx context.Context, grace time.Duration, f func(context.Context) (T, error), late func(T, error)) outcome[T] {
	if ctx.Done() == nil {
		v, err := f(ctx)
		return outcome[T]{v: v, err: err, known: true}
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
		// Once closed, nobody undoes: the level expires after one TTL.
		c.goBackground(func() {
			r := <-done
			late(r.v, r.err)
		})
	}
	return outcome[T]{err: ctxErr(ctx), ended: true}
}

// mayHaveRun reports whether a script call that returned err may have been
// applied. A script's own refusal, and any reply from the server, prove that
// the last attempt did not apply; a command that never left (no connection)
// did not either. But a go-redis client that retries may have sent an
// earlier attempt that was applied and whose reply was lost, and the final
// error says nothing of it, so with retries on only a script's own refusal
// is proof (the scripts recognise their own earlier attempts by request ID,
// so the last attempt's refusal speaks for all of them).
func mayHaveRun(err error, retries bool) bool {
	var granted *grantedError
	switch {
	case err == nil || errors.As(err, &granted):
		return true
	case lua.IsRefusal(err):
		return false
	case retries:
		return true
	case isReply(err) || neverSent(err):
		return false
	}
	return true
}

// isReply reports whether err is an error reply from the server.
func isReply(err error) bool {
	var r redis.Error
	return errors.As(err, &r) && !errors.Is(err, redis.ErrClosed) && !errors.Is(err, redis.ErrPoolTimeout)
}

// neverSent reports errors raised before a command could reach the server:
// no connection could be made, the pool had none to give, or the client was
// closed.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed)
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
