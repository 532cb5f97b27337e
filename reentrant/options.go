package reentrant

import (
	"log/slog"
	"time"

	"github.com/redfence/redfence/lua"
)

// Limits on durations accepted by options and [Lease.Extend].
const (
	// MinTTL is the shortest lease: Redis expires with millisecond
	// resolution.
	MinTTL = time.Millisecond
	// MaxTTL is the longest lease; use renewal for longer holds.
	MaxTTL = 24 * time.Hour
)

// Defaults.
const (
	// DefaultPrefix is the key prefix unless WithPrefix says otherwise.
	DefaultPrefix = "redfence"
	// DefaultTTL is the lease unless WithTTL says otherwise. Fencing, not
	// the TTL, keeps a late writer out; the TTL bounds how long a crashed
	// holder blocks others.
	DefaultTTL = 30 * time.Second
	// DefaultRetryJitter bounds the random delay added to a waiter's poll.
	DefaultRetryJitter = 50 * time.Millisecond
	// DefaultMaxRetryDelay bounds a waiter's poll interval.
	DefaultMaxRetryDelay = 5 * time.Second
	// DefaultHandoffTimeout: see WithHandoffTimeout.
	DefaultHandoffTimeout = time.Second
	// DefaultCounterIdleExpiry is how long, with WithTimeTokens, a name's
	// counter outlives its last token.
	DefaultCounterIdleExpiry = 7 * 24 * time.Hour
)

// Limits of WithCounterIdleExpiry.
const (
	// MinCounterIdleExpiry rides out NTP steps and a failover's skew.
	MinCounterIdleExpiry = time.Hour
	// MaxCounterIdleExpiry is ten years.
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
	identity      string

	lease leaseConfig // the defaults of every call

	redlock    bool // the client is a Redlock's: leases allow for clock drift
	handoffSet bool // WithHandoffTimeout was given, which Redlock refuses
}

// leaseConfig is what a call may set for itself: the lease, its renewal,
// how the call waits, and what it stores with the lock.
type leaseConfig struct {
	ttl       time.Duration
	renew     time.Duration // 0: off
	renewSet  bool
	margin    time.Duration
	marginSet bool
	drift     time.Duration // Redlock's clock-drift allowance; 0 on one deployment
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
		identity:      defaultIdentity(),
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

// WithPrefix sets the key prefix (client only; default "redfence"): the
// lock named N lives at PREFIX:{N}. It must be 1 to 256 bytes without '{'
// or '}'.
func WithPrefix(p string) Option {
	return func(c *config) error {
		if err := c.clientOnly("WithPrefix"); err != nil {
			return err
		}
		if err := CheckPrefix(p); err != nil {
			return err
		}
		c.prefix = p
		return nil
	}
}

// WithTTL sets the lease (per call or per client; default 30 s): how long
// a lock outlives a holder that stops renewing it. It must be whole
// milliseconds from MinTTL to MaxTTL. A reentry's TTL can lengthen the
// lease, never shorten it; renewals use the TTL of the call that started
// the ownership.
func WithTTL(d time.Duration) Option {
	return func(c *config) error {
		if err := checkTTL(d); err != nil {
			return err
		}
		c.lease.ttl = d
		return nil
	}
}

// WithRenewInterval sets how often a held lock's lease is renewed (per
// call or per client; default TTL/3). It must be positive and shorter than
// the TTL less the safety margin. One goroutine per Client renews every
// lease, in one pipeline per Redis node.
func WithRenewInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalid("renew interval %v is not positive", d)
		}
		c.lease.renew, c.lease.renewSet = d, true
		return nil
	}
}

// WithoutRenewal turns renewal off (per call or per client): the lease's
// context ends at the TTL less the safety margin unless [Lease.Extend]
// moves it.
func WithoutRenewal() Option {
	return func(c *config) error {
		c.lease.renew, c.lease.renewSet = 0, true
		return nil
	}
}

// WithSafetyMargin sets how long before Redis could expire the lock a
// lease is declared lost when no renewal was confirmed (per call or per
// client; default TTL/10). It covers clock-rate drift between this host and
// Redis and the time work needs to notice its context ended. It must be
// positive and shorter than the TTL less the renew interval.
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
// maxmemory-policy may evict the fencing counter (client only). An evicted
// counter restarts tokens at 1, and fenced stores then refuse new holders
// until the counter climbs past what they saw; prefer WithTimeTokens.
func WithEvictionAllowed() Option {
	return func(c *config) error {
		if err := c.clientOnly("WithEvictionAllowed"); err != nil {
			return err
		}
		c.allowEviction = true
		return nil
	}
}

// WithRetryJitter bounds the random delay a waiter adds to its default
// poll interval (client only; default 50 ms). Zero disables it; it must be
// from 0 to one minute.
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

// WithMaxRetryDelay bounds a waiter's default poll interval (client only;
// default 5 s). It must be from 1 ms to one hour.
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

// WithHandoffTimeout bounds how long a waiter that died while queued, or
// missed its handoff message, delays the next one (client only; default
// 1 s): a handed lock must be claimed within half of it, and waiters poll
// every quarter of it. It must be whole milliseconds from 4 ms to one hour.
func WithHandoffTimeout(d time.Duration) Option {
	return func(c *config) error {
		if err := c.clientOnly("WithHandoffTimeout"); err != nil {
			return err
		}
		if d < 4*time.Millisecond || d > time.Hour || d%time.Millisecond != 0 {
			return invalid("handoff timeout %v is not a whole number of milliseconds in [4ms, 1h]", d)
		}
		c.handoff, c.handoffSet = d, true
		return nil
	}
}

// WithReplicaAck makes every acquisition wait until at least replicas
// replicas of the lock's primary acknowledged it (Redis WAIT), for at most
// timeout, before its lease and token are returned (client only; default
// off). If fewer acknowledge in time, the acquisition is undone and Lock
// returns ErrNotReplicated. It needs a *redis.Client or *redis.ClusterClient;
// replicas must be from 1 to 64 and timeout whole milliseconds, at least
// 1 ms and shorter than the client's ReadTimeout. docs/design.md
// ("Deployments") says what it protects against.
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

// WithTimeTokens makes every fresh token max(counter + 1, the server's
// time in microseconds) instead of counter + 1, and lets the counter expire
// after an idle time (client only; default off, the strict counter). While
// the counter lives, tokens increase exactly as without it; once the counter
// is lost, tokens go on from the server's clock instead of restarting at 1.
// With it, ErrEvictionPolicy is never returned. docs/safety.md states what
// the clock must do for tokens to stay increasing.
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
// counter outlives the last token issued (client only; default 7 days). It
// must be whole milliseconds from MinCounterIdleExpiry to
// MaxCounterIdleExpiry, longer than the TTL, and needs WithTimeTokens.
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

// apply applies opts in order, then checks them together (finish).
func (c *config) apply(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return invalid("nil option")
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return c.finish()
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
	if c.redlock {
		l.drift = drift(l.ttl)
	}
	if l.margin+l.drift >= l.ttl {
		return invalid("safety margin %v (and drift allowance %v) is not shorter than the TTL %v", l.margin, l.drift, l.ttl)
	}
	if !l.renewSet {
		l.renew = l.ttl / 3
	}
	if l.renew >= l.ttl-l.margin-l.drift {
		return invalid("renew interval %v is not shorter than the TTL %v less the safety margin %v: "+
			"the lease would be declared lost before its first renewal", l.renew, l.ttl, l.margin)
	}
	return nil
}
