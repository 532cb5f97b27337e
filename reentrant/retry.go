package reentrant

import (
	"fmt"
	"time"
)

// RetryStrategy decides how a waiting Lock polls: Backoff(n) is how long it
// sleeps before its n-th poll (n from 1) when no handoff wakes it first, and
// a result of zero or less makes it give up with ErrNotAcquired. A handoff
// still wakes a waiter at once, whatever its strategy. Implementations must
// be safe for concurrent use: one strategy serves every call of a Client.
//
// A strategy that gives up before the first poll (Backoff(1) <= 0, such as
// NoRetry) makes Lock a TryLock: it never joins the queue.
type RetryStrategy interface {
	Backoff(n int) time.Duration
}

type noRetry struct{}

func (noRetry) Backoff(int) time.Duration { return 0 }

// NoRetry gives up at once: Lock behaves as TryLock.
func NoRetry() RetryStrategy { return noRetry{} }

type linearBackoff time.Duration

func (b linearBackoff) Backoff(int) time.Duration { return time.Duration(b) }

func (b linearBackoff) check() error {
	if b <= 0 {
		return invalid("linear backoff %v is not positive", time.Duration(b))
	}
	return nil
}

// linearBackoff polls every d, until the call's context ends; for tests
// (ExponentialBackoff(d, d) is the same).

type exponentialBackoff struct{ min, max time.Duration }

func (b exponentialBackoff) Backoff(n int) time.Duration {
	d := b.min
	for i := 1; i < n && d < b.max; i++ {
		d *= 2
	}
	return min(d, b.max)
}

func (b exponentialBackoff) check() error {
	if b.min <= 0 || b.max < b.min {
		return invalid("exponential backoff from %v to %v: the first must be positive and at most the second", b.min, b.max)
	}
	return nil
}

// ExponentialBackoff polls after lo, then twice as long each time, at most
// hi apart, until the call's context ends. WithRetry refuses lo <= 0 or
// hi < lo.
func ExponentialBackoff(lo, hi time.Duration) RetryStrategy { return exponentialBackoff{lo, hi} }

type limitRetry struct {
	s RetryStrategy
	n int
}

func (l limitRetry) Backoff(n int) time.Duration {
	if n > l.n {
		return 0
	}
	return l.s.Backoff(n)
}

func (l limitRetry) check() error {
	if l.s == nil || l.n < 0 {
		return invalid("LimitRetry(%v, %d): the strategy must be non-nil and the limit not negative", l.s, l.n)
	}
	return checkRetry(l.s)
}

// LimitRetry polls as s does, at most n times, then gives up. LimitRetry(s,
// 0) is NoRetry. WithRetry refuses a nil s or a negative n.
func LimitRetry(s RetryStrategy, n int) RetryStrategy { return limitRetry{s, n} }

// String names the built-in strategies in errors and logs.
func (noRetry) String() string         { return "NoRetry()" }
func (b linearBackoff) String() string { return fmt.Sprintf("LinearBackoff(%v)", time.Duration(b)) }
func (b exponentialBackoff) String() string {
	return fmt.Sprintf("ExponentialBackoff(%v, %v)", b.min, b.max)
}
func (l limitRetry) String() string { return fmt.Sprintf("LimitRetry(%v, %d)", l.s, l.n) }
