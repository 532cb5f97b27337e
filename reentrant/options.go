package reentrant

import (
	"log/slog"
	"time"

	"github.com/redfence/redfence/lua"
)

// Limits on durations accepted by options and [Lease.Extend].
const (
	// MinTTL is the shortest lease: Redis expires keys with millisecond
	// resolution.
	MinTTL = time.Millisecond
	// MaxTTL is the longest lease. A lock that outlives a crashed holder by
	// more than a day is almost always a bug; use renewal instead.
	MaxTTL = 24 * time.Hour
)

// Defaults.
const (
	// DefaultPrefix is the key prefix unless WithPrefix says otherwise.
	DefaultPrefix = "redfence"
	// DefaultTTL is the lease unless WithTTL says otherwise. 30 s rides out
	// GC pauses, failovers and network blips without losing a renewed
	// lock, and frees the lock of a crashed holder within half a minute.
	// Fencing, not the TTL, is what keeps a late writer out.
	DefaultTTL = 30 * time.Second
	// DefaultRetryJitter bounds the random delay added when a waiter wakes
	// because the holder's TTL ran out, so waiters do not stampede.
	DefaultRetryJitter = 50 * time.Millisecond
	// DefaultMaxRetryDelay bounds how long a waiter sleeps between attempts
	// when no release is published.
	DefaultMaxRetryDelay = 5 * time.Second
	// DefaultHandoffTimeout bounds how long a waiter that died (or whose
	// handoff message was lost) can hold up the next one: see
	// WithHandoffTimeout.
	DefaultHandoffTimeout = time.Second
	// DefaultCounterIdleExpiry is how long, with WithTimeTokens, a name's
	// counter outlives the last token issued unless WithCounterIdleExpiry
	// says otherwise: a week, so that a name used once costs a key for a
	// week, and the server clock may step back by up to a week without a
	// token repeating.
	DefaultCounterIdleExpiry = 7 * 24 * time.Hour
)

// Limits of WithCounterIdleExpiry.
const (
	// MinCounterIdleExpiry is the shortest idle expiry of a time-mode
	// counter. While the counter lives, tokens increase whatever the clock
	// does; once it has expired, only the clock orders them. An hour rides
	// out the clock steps NTP makes and a failover's worth of skew.
	MinCounterIdleExpiry = time.Hour
	// MaxCounterIdleExpiry is the longest: ten years.
	MaxCounterIdleExpiry = 10 * 365 * 24 * time.Hour
)

// Option configures a Client (given to [New]) or one call (given to
// [Client.Lock], [Client.TryLock] or [Client.Do], where it overrides the
// client's default for that call only). Each option's doc says whether it
// applies per call; a client-only option given to a call, or an option
// given an out-of-range value, makes New or the call fail with ErrInvalid.
// Nothing is clamped.
type Option func(*config) error

type config struct {
	call bool // applying options to one call, not to a client

	prefix        string
	jitter        time.Duration
	maxRetryDelay time.Duration
	ackReplicas   int
	ackTimeout    time.Duration
	allowEviction bool
	handoff       time.Duration
	tokens        lua.Tokens
	idleSet       bool
	log           *slog.Logger
	observe       func(Event)

	lease leaseConfig // the defaults of every call
}

// leaseConfig is what a call may set for itself: the lease, its renewal,
// how the call waits, and what it stores with the lock.
type leaseConfig struct {
	ttl       time.Duration
	renew     time.Duration // 0: off
	renewSet  bool
	margin    time.Duration
	marginSet bool
	retry     RetryStrategy // nil: poll as the handoff timeout says, until ctx ends
	meta      string
	maxDepth  int64
}

func defaults() config {
	return config{
		prefix:        DefaultPrefix,
		jitter:        DefaultRetryJitter,
		maxRetryDelay: DefaultMaxRetryDelay,
		handoff:       DefaultHandoffTimeout,
		tokens:        lua.Tokens{Idle: DefaultCounterIdleExpiry},
		log:           slog.New(slog.DiscardHandler),
		lease:         leaseConfig{ttl: DefaultTTL, maxDepth: DefaultMaxDepth},
	}
}

// clientOnly returns the error of a client option given to a call.
func (c *config) clientOnly(name string) error {
	if c.call {
		return invalid("%s applies to a Client, not to one call: give it to New", name)
	}
	return nil
}

// WithPrefix sets the key prefix (default "redfence"): the lock named N
// lives at PREFIX:{N}. It must be 1 to 256 bytes without '{' or '}'.
func WithPrefix(p string) Option {
	return func(c *config) error {
		if err := c.clientOnly("WithPrefix"); err != nil {
			return err
		}
		if err := CheckPrefix(p); err != nil {
			return invalid("%v", err)
		}
		c.prefix = p
		return nil
	}
}

// WithTTL sets the lease (default 30 s): how long a lock outlives a holder
// that stops renewing it. It must be a whole number of milliseconds from
// MinTTL to MaxTTL.
func WithTTL(d time.Duration) Option {
	return func(c *config) error {
		if err := checkTTL(d); err != nil {
			return err
		}
		c.lease.ttl = d
		return nil
	}
}

// WithRenewInterval sets how often a held lock's lease is renewed
// (default TTL/3). It must be positive and shorter than the TTL less the
// safety margin; the default leaves room for two attempts.
//
// One goroutine per Client renews every lease, in one pipeline per Redis
// node per tick; it ticks every quarter of the interval (at least 1 ms), so
// a renewal may be sent up to a quarter interval early, never late.
func WithRenewInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalid("renew interval %v is not positive", d)
		}
		c.lease.renew, c.lease.renewSet = d, true
		return nil
	}
}

// WithoutRenewal turns renewal off (it is on by default): a lease's
// context then ends at the TTL less the safety margin, counted from the
// acquisition's send time, unless [Lease.Extend] moves it.
func WithoutRenewal() Option {
	return func(c *config) error {
		c.lease.renew, c.lease.renewSet = 0, true
		return nil
	}
}

// WithSafetyMargin sets how long before Redis could expire the lock a
// lease is declared lost when no renewal was confirmed (default TTL/10).
// The lease's context ends at the send time of the last confirmed
// acquisition or renewal plus TTL minus this margin, on this process's
// monotonic clock. The margin covers the rate at which this host's clock may
// run slower than Redis's, over one TTL, and the time work under the lease
// needs to notice its context and stop. It must be positive and shorter
// than the TTL, and with renewal on the renew interval must be shorter than
// TTL - margin, or New returns ErrInvalid.
func WithSafetyMargin(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalid("safety margin %v is not positive", d)
		}
		c.lease.margin, c.lease.marginSet = d, true
		return nil
	}
}

// WithEvictionAllowed lets the client lock on a server whose
// maxmemory-policy may evict the fencing counter (allkeys-*). Without it,
// Lock and TryLock return ErrEvictionPolicy there (not with
// WithTimeTokens, which does not need the counter to survive). With it, an
// evicted counter restarts tokens at 1: fenced stores that saw higher
// tokens then refuse every new holder until the counter climbs past them.
func WithEvictionAllowed() Option {
	return func(c *config) error {
		if err := c.clientOnly("WithEvictionAllowed"); err != nil {
			return err
		}
		c.allowEviction = true
		return nil
	}
}

// WithRetryJitter sets the upper bound of the random delay a waiter adds
// to its poll interval (default 50 ms), so waiters do not poll in step. Zero
// disables it; it must not be negative or above one minute.
func WithRetryJitter(d time.Duration) Option {
	return func(c *config) error {
		if err := c.clientOnly("WithRetryJitter"); err != nil {
			return err
		}
		if d < 0 || d > time.Minute {
			return invalid("retry jitter %v is outside [0, 1m]", d)
		}
		c.jitter = d
		return nil
	}
}

// WithMaxRetryDelay sets the longest a waiting Lock sleeps between polls
// (default 5 s); waiters poll at least every quarter of the handoff
// timeout anyway (see WithHandoffTimeout). It must be from 1 ms to one
// hour.
func WithMaxRetryDelay(d time.Duration) Option {
	return func(c *config) error {
		if err := c.clientOnly("WithMaxRetryDelay"); err != nil {
			return err
		}
		if d < time.Millisecond || d > time.Hour {
			return invalid("max retry delay %v is outside [1ms, 1h]", d)
		}
		c.maxRetryDelay = d
		return nil
	}
}

// WithHandoffTimeout sets how long, at most, a waiter that died while
// queued, or whose handoff message was lost, delays the next waiter
// (default 1 s). A lock handed to a waiter must be claimed within half of
// it, or it expires and passes on; waiters poll every quarter of it, which
// is also how soon a lock whose holder died is handed on once its TTL has
// run out. Shorter means faster recovery and more polling (each waiter
// polls 4/d times a second). It must be a whole number of milliseconds
// from 4 ms to one hour.
func WithHandoffTimeout(d time.Duration) Option {
	return func(c *config) error {
		if err := c.clientOnly("WithHandoffTimeout"); err != nil {
			return err
		}
		if d < 4*time.Millisecond || d > time.Hour || d%time.Millisecond != 0 {
			return invalid("handoff timeout %v is not a whole number of milliseconds in [4ms, 1h]", d)
		}
		c.handoff = d
		return nil
	}
}

// WithReplicaAck makes every acquisition wait, before its lease and token
// are returned, until at least replicas replicas of the lock's primary have
// acknowledged it (Redis WAIT), for at most timeout. Default: off (0).
//
// Redis replicates asynchronously, so without it a primary that fails right
// after an acquisition can take the counter's last increments with it, and
// the promoted replica issues those tokens again. With it, every token handed
// out is on at least that many replicas; if replicas acknowledge too late,
// the acquisition is undone and Lock and TryLock return ErrNotReplicated.
// A failover must then promote one of the acknowledging replicas: ask for
// all of them, or rely on Sentinel's and Cluster's preference for the most
// up-to-date replica. It costs one round trip to the replicas per
// acquisition and reentry.
//
// It needs a *redis.Client (standalone, or Sentinel through
// NewFailoverClient) or a *redis.ClusterClient, because WAIT must run on the
// connection that ran the script. replicas must be from 1 to 64, and timeout
// a whole number of milliseconds from 1 ms up to, and shorter than, the
// client's ReadTimeout; New checks all of this.
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(c *config) error {
		if err := c.clientOnly("WithReplicaAck"); err != nil {
			return err
		}
		if replicas < 1 || replicas > 64 {
			return invalid("replica acknowledgement count %d is outside [1, 64]", replicas)
		}
		if timeout < time.Millisecond || timeout%time.Millisecond != 0 {
			return invalid("replica acknowledgement timeout %v is not a whole number of milliseconds of at least 1ms", timeout)
		}
		c.ackReplicas, c.ackTimeout = replicas, timeout
		return nil
	}
}

// WithTimeTokens makes every fresh token (an acquisition of a free lock, a
// handoff to a waiter) max(counter + 1, the Redis server's time in
// microseconds) instead of counter + 1, and lets the counter expire after
// an idle time (WithCounterIdleExpiry, default 7 days), refreshed whenever
// a token is issued. Default: off, the strict counter, which never expires.
//
// While the counter lives, tokens strictly increase exactly as without
// the option. When it is lost (a restart without persistence, a failover
// to a replica that missed its last writes, eviction, idle expiry), tokens
// go on from the server's clock instead of restarting at 1: the next token
// is above every earlier one unless the serving primary's clock is behind
// the last token issued, that is, behind the old primary's clock by more
// than the time between that token and the loss. Tokens are then about
// 1.8e15 (microseconds since 1970), still below 2^53, and no longer count
// acquisitions. Clients with and without the option may share names: both
// issue tokens above the counter. docs/safety.md states the assumptions.
//
// With it, a server whose maxmemory-policy may evict the counter is
// accepted (an evicted counter is a lost counter, which the clock covers),
// so ErrEvictionPolicy is never returned.
func WithTimeTokens() Option {
	return func(c *config) error {
		if err := c.clientOnly("WithTimeTokens"); err != nil {
			return err
		}
		c.tokens.Time = true
		return nil
	}
}

// WithCounterIdleExpiry sets how long, with WithTimeTokens, a name's
// counter outlives the last token issued (default 7 days), so that a name
// used once does not keep a key forever. While the counter lives, tokens
// increase whatever the server's clock does; after it has expired, the next
// token is the clock's, above the last one unless the clock stepped back
// by more than d. It must be a whole number of milliseconds from
// MinCounterIdleExpiry (1 h) to MaxCounterIdleExpiry (10 years) and longer
// than the TTL, and needs WithTimeTokens: without it the counter never
// expires. New returns ErrInvalid otherwise.
func WithCounterIdleExpiry(d time.Duration) Option {
	return func(c *config) error {
		if err := c.clientOnly("WithCounterIdleExpiry"); err != nil {
			return err
		}
		if d < MinCounterIdleExpiry || d > MaxCounterIdleExpiry || d%time.Millisecond != 0 {
			return invalid("counter idle expiry %v is not a whole number of milliseconds in [%v, %v]", d, MinCounterIdleExpiry, MaxCounterIdleExpiry)
		}
		c.tokens.Idle, c.idleSet = d, true
		return nil
	}
}

func checkTTL(d time.Duration) error {
	switch {
	case d < MinTTL || d > MaxTTL:
		return invalid("TTL %v is outside [%v, %v]", d, MinTTL, MaxTTL)
	case d%time.Millisecond != 0:
		return invalid("TTL %v is not a whole number of milliseconds", d)
	}
	return nil
}

// finish checks the options together and derives the defaults that
// depend on the TTL, for a client or (c.call) for one call.
func (c *config) finish() error {
	if c.idleSet && !c.tokens.Time {
		return invalid("WithCounterIdleExpiry needs WithTimeTokens: the strict counter never expires")
	}
	l := &c.lease
	if c.tokens.Time && c.tokens.Idle <= l.ttl {
		return invalid("counter idle expiry %v is not longer than the TTL %v", c.tokens.Idle, l.ttl)
	}
	if !l.marginSet {
		l.margin = l.ttl / 10
	}
	if l.margin >= l.ttl {
		return invalid("safety margin %v is not shorter than the TTL %v", l.margin, l.ttl)
	}
	if !l.renewSet {
		l.renew = l.ttl / 3
	}
	if l.renew >= l.ttl-l.margin {
		return invalid("renew interval %v is not shorter than the TTL %v less the safety margin %v: "+
			"the lease would be declared lost before its first renewal", l.renew, l.ttl, l.margin)
	}
	return nil
}
