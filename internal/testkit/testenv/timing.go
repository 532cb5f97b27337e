package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SchedulerSlack is what a test allows a loaded two-core machine to add to
// a bound it asserts (a call's context deadline plus the library's
// CleanupBudget, say). A test that uses it picks its scenario so that the
// failure it looks for lands far beyond bound + SchedulerSlack: go-redis's
// default 3 s read timeout, a 5 s poll, a lease that never ends.
const SchedulerSlack = time.Second

// Within fails t unless took is at most bound + SchedulerSlack, saying what
// was bounded: the check for "returns by its bound" that a busy scheduler
// cannot fail.
func Within(t testing.TB, took, bound time.Duration, what string) {
	t.Helper()
	if took > bound+SchedulerSlack {
		t.Fatalf("%s took %v, beyond its bound %v (plus %v for the scheduler)", what, took, bound, SchedulerSlack)
	}
}

// Hook is a go-redis hook made of two optional functions. Sent sees each
// round trip before it goes out: one command, or a pipeline's commands
// (pipe set). Done sees the same round trip once it returned, with the
// error the client returns for it. Neither may change what is sent; a hook
// that must (to refuse or delay a command) is written for its test.
type Hook struct {
	Sent func(cmds []redis.Cmder, pipe bool)
	Done func(cmds []redis.Cmder, pipe bool, err error)
}

// DialHook passes dials through.
func (h Hook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook calls Sent and Done around a single command.
func (h Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		one := []redis.Cmder{cmd}
		if h.Sent != nil {
			h.Sent(one, false)
		}
		err := next(ctx, cmd)
		if h.Done != nil {
			h.Done(one, false, err)
		}
		return err
	}
}

// ProcessPipelineHook calls Sent and Done around a pipeline.
func (h Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.Sent != nil {
			h.Sent(cmds, true)
		}
		err := next(ctx, cmds)
		if h.Done != nil {
			h.Done(cmds, true, err)
		}
		return err
	}
}

// Await calls cond every millisecond or so until it returns true, and
// reports whether it did within d. Unlike require.Eventually it calls
// cond on the caller's goroutine, so cond may fail the test itself, and it
// leaves the failure (and what to say about it) to the caller.
func Await(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for tick := time.Millisecond; ; tick = min(2*tick, 10*time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(tick)
	}
}

// ShortTimeouts sets the options of a client whose server a test will
// freeze, kill or cut off, so that the fault turns into errors within a
// lease instead of go-redis's defaults (a 5 s dial, 3 s reads, three
// retries): dial, read and write timeouts of d, a pool timeout of 2d, the
// given retries (-1 for none), the context's deadline honoured, and no
// CLIENT SETINFO at connect (one more round trip to time out).
func ShortTimeouts(d time.Duration, retries int) func(*redis.Options) {
	return func(o *redis.Options) {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = d, d, d, 2*d
		o.MaxRetries, o.ContextTimeoutEnabled, o.DisableIdentity = retries, true, true
	}
}
