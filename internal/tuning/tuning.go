// Package tuning changes what package reentrant fixes for its users: how
// its waiters poll, how its leases renew, the identity it records. Only
// this module's tests and the redfence CLI use it; reentrant's doc states
// each default.
//
// Package reentrant sets these functions when it is initialised. Each
// returns a reentrant.ClientOption (HandoffTimeout, MaxRetryDelay,
// RetryJitter, Identity) or a reentrant.CallOption (RenewInterval,
// SafetyMargin) as an any, which the caller converts: this package cannot
// name reentrant's types, which import it. An out-of-range value makes
// reentrant.New, or the call, fail with reentrant.ErrInvalid.
package tuning

import "time"

var (
	// HandoffTimeout bounds how long a waiter that died while queued, or
	// missed its handoff message, delays the next one (default 1 s): a
	// handed lock must be claimed within half of it, and waiters poll every
	// quarter of it. Whole milliseconds from 4 ms to one hour; New only.
	HandoffTimeout func(d time.Duration) any
	// MaxRetryDelay bounds a waiter's default poll interval (default 5 s),
	// from 1 ms to one hour.
	MaxRetryDelay func(d time.Duration) any
	// RetryJitter bounds the random delay a waiter adds to its default
	// poll interval (default 50 ms), from 0 (none) to one minute.
	RetryJitter func(d time.Duration) any
	// Identity names the client in the forced-unlock record (default
	// "<hostname>/<pid>"): 1 to 256 bytes of valid UTF-8 without control
	// characters.
	Identity func(s string) any
	// RenewInterval sets how often a lease is renewed (default TTL/3): it
	// must be positive and shorter than the TTL less the safety margin.
	RenewInterval func(d time.Duration) any
	// SafetyMargin sets how long before Redis could expire the lock a lease
	// is declared lost when no renewal was confirmed (default TTL/10): it
	// must be positive and shorter than the TTL less the renew interval.
	SafetyMargin func(d time.Duration) any
)

// IdentityMaxLen is the longest identity Identity accepts, in bytes.
const IdentityMaxLen = 256
