package reentrant

import (
	"log/slog"
	"time"
)

// ClientOption configures a Client: it is given to [New] or [NewRedlock].
// An option given an out-of-range value makes New fail with ErrInvalid;
// nothing is clamped.
type ClientOption interface {
	applyClient(*config) error
}

// CallOption configures one lock call: given to [Client.Lock],
// [Client.TryLock] or [Client.Do], it overrides the client's default for
// that call only; given to New or NewRedlock (every CallOption is a
// ClientOption), it sets that default. An out-of-range value makes the
// call fail with ErrInvalid.
type CallOption interface {
	ClientOption
	applyCall(*leaseConfig) error
}

// clientOption is a ClientOption that is not a CallOption.
type clientOption func(*config) error

func (f clientOption) applyClient(c *config) error { return f(c) }

// callOption sets what one call may set for itself.
type callOption func(*leaseConfig) error

func (f callOption) applyClient(c *config) error    { return f(&c.lease) }
func (f callOption) applyCall(l *leaseConfig) error { return f(l) }

// WithPrefix sets the key prefix (client only; default "redfence"): the
// lock named N lives at PREFIX:{N}. It must be 1 to 256 bytes without '{'
// or '}'.
func WithPrefix(p string) ClientOption {
	return clientOption(func(c *config) error {
		if err := checkPrefix(p); err != nil {
			return err
		}
		c.prefix = p
		return nil
	})
}

// WithTTL sets the lease (per call or per client; default 30 s): how long
// a lock outlives a holder that stops renewing it. It must be whole
// milliseconds from MinTTL to MaxTTL. A reentry's TTL can lengthen the
// lease, never shorten it; renewals use the TTL of the call that started
// the ownership.
func WithTTL(d time.Duration) CallOption {
	return callOption(func(l *leaseConfig) error {
		if err := checkTTL(d); err != nil {
			return err
		}
		l.ttl = d
		return nil
	})
}

// WithRenewInterval sets how often a held lock's lease is renewed (per
// call or per client; default TTL/3). It must be positive and shorter than
// the TTL less the safety margin. One goroutine per Client renews every
// lease, in one pipeline per Redis node.
func WithRenewInterval(d time.Duration) CallOption {
	return callOption(func(l *leaseConfig) error {
		if d <= 0 {
			return invalid("renew interval %v is not positive", d)
		}
		l.renew, l.renewSet = d, true
		return nil
	})
}

// WithoutRenewal turns renewal off (per call or per client): the lease's
// context ends at the TTL less the safety margin unless [Lease.Extend]
// moves it.
func WithoutRenewal() CallOption {
	return callOption(func(l *leaseConfig) error {
		l.renew, l.renewSet = 0, true
		return nil
	})
}

// WithSafetyMargin sets how long before Redis could expire the lock a
// lease is declared lost when no renewal was confirmed (per call or per
// client; default TTL/10). It covers clock-rate drift between this host and
// Redis and the time work needs to notice its context ended. It must be
// positive and shorter than the TTL less the renew interval.
func WithSafetyMargin(d time.Duration) CallOption {
	return callOption(func(l *leaseConfig) error {
		if d <= 0 {
			return invalid("safety margin %v is not positive", d)
		}
		l.margin, l.marginSet = d, true
		return nil
	})
}

// WithEvictionAllowed lets the client lock on a server whose
// maxmemory-policy may evict the fencing counter (client only). An evicted
// counter restarts tokens at 1, and fenced stores then refuse new holders
// until the counter climbs past what they saw. It matters only with
// WithStrictTokens: time tokens (the default) survive a lost key.
func WithEvictionAllowed() ClientOption {
	return clientOption(func(c *config) error {
		c.allowEviction = true
		return nil
	})
}

// WithRetryJitter bounds the random delay a waiter adds to its default
// poll interval (client only; default 50 ms). Zero disables it; it must be
// from 0 to one minute.
func WithRetryJitter(d time.Duration) ClientOption {
	return clientOption(func(c *config) error {
		if d < 0 || d > time.Minute {
			return invalid("retry jitter %v is outside [0, 1m]", d)
		}
		c.jitter = d
		return nil
	})
}

// WithMaxRetryDelay bounds a waiter's default poll interval (client only;
// default 5 s). It must be from 1 ms to one hour.
func WithMaxRetryDelay(d time.Duration) ClientOption {
	return clientOption(func(c *config) error {
		if d < time.Millisecond || d > time.Hour {
			return invalid("max retry delay %v is outside [1ms, 1h]", d)
		}
		c.maxRetryDelay = d
		return nil
	})
}

// WithHandoffTimeout bounds how long a waiter that died while queued, or
// missed its handoff message, delays the next one (client only; default
// 1 s): a handed lock must be claimed within half of it, and waiters poll
// every quarter of it. It must be whole milliseconds from 4 ms to one hour.
func WithHandoffTimeout(d time.Duration) ClientOption {
	return clientOption(func(c *config) error {
		if d < 4*time.Millisecond || d > time.Hour || d%time.Millisecond != 0 {
			return invalid("handoff timeout %v is not a whole number of milliseconds in [4ms, 1h]", d)
		}
		c.handoff, c.handoffSet = d, true
		return nil
	})
}

// WithReplicaAck makes every acquisition wait until at least replicas
// replicas of the lock's primary acknowledged it (Redis WAIT), for at most
// timeout, before its lease and token are returned (client only; default
// off). If fewer acknowledge in time, the acquisition is undone and Lock
// returns ErrNotReplicated. It needs a *redis.Client or *redis.ClusterClient;
// replicas must be from 1 to 64 and timeout whole milliseconds, at least
// 1 ms and shorter than the client's ReadTimeout. docs/deployments.md
// ("Replication and WithReplicaAck") says what it protects against.
func WithReplicaAck(replicas int, timeout time.Duration) ClientOption {
	return clientOption(func(c *config) error {
		if replicas < 1 || replicas > 64 {
			return invalid("replica acknowledgement count %d is outside [1, 64]", replicas)
		}
		if timeout < time.Millisecond || timeout%time.Millisecond != 0 {
			return invalid("replica acknowledgement timeout %v is not a whole number of milliseconds of at least 1ms", timeout)
		}
		c.ackReplicas, c.ackTimeout = replicas, timeout
		return nil
	})
}

// WithStrictTokens makes every fresh token the name's own counter + 1, a
// small integer, instead of a time token (client only; by default a fresh
// token is max(the floor of the name's hash slot + 1, the server's time
// in microseconds), and the floor expires a week after its last write).
// The counter is a key per name that never expires, and a released name
// keeps it (about 70 B) forever. A lost counter restarts at 1 and hands
// out tokens a living holder may still have: a FLUSHALL, a restart without
// persistence, a failover to a replica that missed writes, an eviction,
// or a DEL of the counter key. Use it only on one primary with
// appendfsync always, no failover and no eviction; docs/safety.md
// measures what each of those events does to it.
//
// Every client of one prefix must use the same token mode: a strict
// client refuses a name whose slot has a time-token floor, and a
// time-token client a name with a strict counter, with ErrInvalid naming
// the key, so that neither issues a token below the other's. It fails
// with ErrInvalid with NewRedlock.
func WithStrictTokens() ClientOption {
	return clientOption(func(c *config) error {
		c.strict = true
		return nil
	})
}

// WithMetadata stores s with an ownership the call starts (per call or per
// client), for [Client.Inspect] and `redfence inspect` to show: who took
// the lock and why, say "worker-3 job 1842". A reentry keeps the
// ownership's metadata. s must be valid UTF-8 of at most MaxMetadataLen
// bytes without control characters; "" (the default) stores nothing.
func WithMetadata(s string) CallOption {
	return callOption(func(l *leaseConfig) error {
		if err := checkMetadata(s); err != nil {
			return err
		}
		l.meta = s
		return nil
	})
}

// WithMaxDepth bounds how deep an ownership may reenter (per call or per
// client; default DefaultMaxDepth): a Lock or TryLock that would hold the
// lock at a depth above n fails with ErrTooDeep and changes nothing. The
// check is made by Redis, so it holds across every process of the owner.
// n must be from 1 (no reentry) to MaxDepth.
func WithMaxDepth(n int) CallOption {
	return callOption(func(l *leaseConfig) error {
		if n < 1 || n > MaxDepth {
			return invalid("max depth %d is outside [1, %d]", n, MaxDepth)
		}
		l.maxDepth = int64(n)
		return nil
	})
}

// WithLogger makes the client log to l (client only): lost leases and
// failed renewals at Warn, undo steps and retries at Debug. Default: no
// logging. A nil l is ErrInvalid.
func WithLogger(l *slog.Logger) ClientOption {
	return clientOption(func(c *config) error {
		if l == nil {
			return invalid("nil logger")
		}
		c.log = l
		return nil
	})
}

// WithObserver calls f with every Event of the client (client only), for
// metrics: package github.com/redfence/redfence/metrics records them with
// OpenTelemetry. f runs on the goroutine that caused the event, so it must
// be quick and must not call the Client. A nil f is ErrInvalid.
func WithObserver(f func(Event)) ClientOption {
	return clientOption(func(c *config) error {
		if f == nil {
			return invalid("nil observer")
		}
		c.observe = f
		return nil
	})
}

// WithIdentity names this client in the records it leaves in Redis for
// operators: who forced a lock open ([Client.ForceUnlock]), shown by
// [Client.Inspect] and `redfence inspect` (client only; default
// "<hostname>/<pid>"). s must be 1 to MaxMetadataLen bytes of valid UTF-8
// without control characters.
func WithIdentity(s string) ClientOption {
	return clientOption(func(c *config) error {
		if s == "" {
			return invalid("empty identity")
		}
		if err := checkText("identity", s, MaxMetadataLen); err != nil {
			return err
		}
		c.identity = s
		return nil
	})
}

// WithRetry sets how a Lock that cannot take the lock at once waits (per
// call or per client). Default: it polls every quarter of the handoff
// timeout (see WithHandoffTimeout), sooner when the holder's lease ends
// sooner, with jitter, until its context ends. Whatever the strategy, a
// waiter keeps its place in the fair queue and a handoff wakes it at once.
// A nil s is ErrInvalid.
func WithRetry(s RetryStrategy) CallOption {
	return callOption(func(l *leaseConfig) error {
		if err := checkRetry(s); err != nil {
			return err
		}
		l.retry = s
		return nil
	})
}

// WithRejoinDelay sets how long a Redlock node found empty (new, restarted
// without its data, or flushed) takes part in no majority (NewRedlock
// only; default the TTL plus its drift allowance, TTL/100 + 2 ms). An
// empty node has forgotten the leases it granted, and a majority that
// counts it could grant a lock another client still holds; once every
// lease it may have granted has run out, it votes again. The delay must
// cover the longest TTL any client of the deployment uses: set it on every
// client to that TTL plus its drift allowance when clients use different
// TTLs. A call whose TTL the delay does not cover fails with ErrInvalid.
// It must be whole milliseconds from the TTL plus its drift allowance to
// MaxTTL plus its allowance; ErrInvalid otherwise, and with New.
func WithRejoinDelay(d time.Duration) ClientOption {
	return millisOption("rejoin delay", d, MinTTL, MaxTTL+drift(MaxTTL), func(c *config) {
		c.rejoin, c.rejoinSet = d, true
	})
}

// millisOption is a client option that checks that d, the setting named
// what, is whole milliseconds from lo to hi (ErrInvalid otherwise), and
// then applies set.
func millisOption(what string, d, lo, hi time.Duration, set func(*config)) ClientOption {
	return clientOption(func(c *config) error {
		if d < lo || d > hi || d%time.Millisecond != 0 {
			return invalid("%s %v is not a whole number of milliseconds in [%v, %v]", what, d, lo, hi)
		}
		set(c)
		return nil
	})
}
