package reentrant

import (
	"log/slog"
	"time"

	"github.com/redfence/redfence/internal/tuning"
)

func init() {
	tuning.HandoffTimeout = func(d time.Duration) any { return withHandoffTimeout(d) }
	tuning.MaxRetryDelay = func(d time.Duration) any { return withMaxRetryDelay(d) }
	tuning.RetryJitter = func(d time.Duration) any { return withRetryJitter(d) }
	tuning.Identity = func(s string) any { return withIdentity(s) }
	tuning.RenewInterval = func(d time.Duration) any { return withRenewInterval(d) }
	tuning.SafetyMargin = func(d time.Duration) any { return withSafetyMargin(d) }
}

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

// WithTTL sets the lease (per call or per client; default DefaultTTL): how
// long a lock outlives a holder that stops renewing it, whole milliseconds up
// to MaxTTL. The lease is renewed every TTL/3, and declared lost when no
// renewal was confirmed by the TTL less TTL/10 (the safety margin, which
// covers clock-rate drift and the time work takes to notice). A reentry's
// TTL can lengthen the lease, never shorten it.
func WithTTL(d time.Duration) CallOption {
	return callOption(func(l *leaseConfig) error {
		if err := checkTTL(d); err != nil {
			return err
		}
		l.ttl = d
		return nil
	})
}

// withRenewInterval is tuning.RenewInterval.
func withRenewInterval(d time.Duration) CallOption {
	return callOption(func(l *leaseConfig) error {
		if d <= 0 {
			return invalid("renew interval %v is not positive", d)
		}
		l.renew, l.renewSet = d, true
		return nil
	})
}

// WithoutRenewal turns renewal off (per call or per client): the lease's
// context ends at the TTL less its safety margin unless [Lease.Extend]
// moves it.
func WithoutRenewal() CallOption {
	return callOption(func(l *leaseConfig) error {
		l.renew, l.renewSet = 0, true
		return nil
	})
}

// withSafetyMargin is tuning.SafetyMargin.
func withSafetyMargin(d time.Duration) CallOption {
	return callOption(func(l *leaseConfig) error {
		if d <= 0 {
			return invalid("safety margin %v is not positive", d)
		}
		l.margin, l.marginSet = d, true
		return nil
	})
}

// withEvictionAllowed lets a client built WithStrictTokens lock on a
// server whose maxmemory-policy may evict the fencing counter; for tests
// only: an evicted counter restarts tokens at 1.
func withEvictionAllowed() ClientOption {
	return clientOption(func(c *config) error {
		c.allowEviction = true
		return nil
	})
}

// withRetryJitter is tuning.RetryJitter.
func withRetryJitter(d time.Duration) ClientOption {
	return clientOption(func(c *config) error {
		if d < 0 || d > time.Minute {
			return invalid("retry jitter %v is outside [0, 1m]", d)
		}
		c.jitter = d
		return nil
	})
}

// withMaxRetryDelay is tuning.MaxRetryDelay.
func withMaxRetryDelay(d time.Duration) ClientOption {
	return clientOption(func(c *config) error {
		if d < time.Millisecond || d > time.Hour {
			return invalid("max retry delay %v is outside [1ms, 1h]", d)
		}
		c.maxRetryDelay = d
		return nil
	})
}

// withHandoffTimeout is tuning.HandoffTimeout.
func withHandoffTimeout(d time.Duration) ClientOption {
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

// WithStrictTokens makes every fresh token the name's own counter + 1, a small
// integer, instead of a time token (client only; by default a fresh token is
// max(the floor of the name's hash slot + 1, the server's time in µs), and
// the floor expires a week after its last write). The counter never expires
// (about 70 B per name). A lost counter (FLUSHALL, a restart without
// persistence, a failover that missed writes, an eviction, a DEL) restarts
// at 1 and repeats tokens: use it only on one primary with appendfsync
// always, no failover and no eviction (on an allkeys-* maxmemory-policy,
// Lock returns ErrEvictionPolicy); docs/safety.md measures each event. Every
// client of one prefix must use the same token mode: a name of the other
// mode is ErrInvalid. With NewRedlock it is ErrInvalid.
func WithStrictTokens() ClientOption {
	return clientOption(func(c *config) error {
		c.strict = true
		return nil
	})
}

// WithMetadata stores s with an ownership the call starts (per call or per
// client) for [Client.Inspect] and `redfence inspect`: who took the lock and
// why. A reentry keeps the ownership's metadata. s must be valid UTF-8 of
// at most 256 bytes without control characters; "" (the default) stores
// nothing.
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
// client; default 1024): a Lock that would hold the lock deeper than n fails
// with ErrTooDeep and changes nothing, in every process of the owner (Redis
// checks it). n must be from 1 (no reentry) to 1<<20.
func WithMaxDepth(n int) CallOption {
	return callOption(func(l *leaseConfig) error {
		if n < 1 || n > maxDepthLimit {
			return invalid("max depth %d is outside [1, %d]", n, maxDepthLimit)
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

// withIdentity is tuning.Identity.
func withIdentity(s string) ClientOption {
	return clientOption(func(c *config) error {
		if s == "" {
			return invalid("empty identity")
		}
		if err := checkText("identity", s, tuning.IdentityMaxLen); err != nil {
			return err
		}
		c.identity = s
		return nil
	})
}

// WithRetry sets how a Lock that cannot take the lock at once waits (per
// call or per client). Default: it polls every 250 ms at most (sooner when
// the holder's lease ends sooner), with up to 50 ms of jitter, until its
// context ends; a handoff wakes a waiter at once, whatever the strategy, and
// a waiter keeps its place in the fair queue. A nil s is ErrInvalid.
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
// without its data, or flushed) votes in no majority (NewRedlock only;
// default the TTL plus its drift allowance, TTL/100 + 2 ms), so that every
// lease it may have granted has run out first. It must cover the longest TTL
// any client of the deployment uses: give every client that TTL plus its
// allowance when TTLs differ. A call whose TTL it does not cover, a value that
// is not whole milliseconds from the TTL plus allowance to MaxTTL plus its
// allowance, and New are ErrInvalid. docs/redlock.md ("delayed rejoin") says
// how an operator may spare a new node the delay.
func WithRejoinDelay(d time.Duration) ClientOption {
	return millisOption("rejoin delay", d, minTTL, MaxTTL+drift(MaxTTL), func(c *config) {
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
