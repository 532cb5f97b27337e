package reentrant

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redfence/redfence/internal/scripts"
)

// A lease lasts DefaultTTL unless WithTTL says otherwise, and WithTTL and
// [Lease.Extend] accept whole milliseconds up to MaxTTL. Fencing, not the
// TTL, keeps a late writer out; the TTL bounds how long a crashed holder
// blocks others. For holds longer than MaxTTL, renewal extends the lease.
const (
	DefaultTTL = 30 * time.Second
	MaxTTL     = 24 * time.Hour
)

// The defaults and limits that are not exported; each option's doc states
// the ones it concerns.
const (
	minTTL                = time.Millisecond // Redis expires with millisecond resolution
	defaultRetryJitter    = 50 * time.Millisecond
	defaultMaxRetryDelay  = 5 * time.Second
	defaultHandoffTimeout = time.Second
	defaultMaxDepth       = 1024
	maxDepthLimit         = 1 << 20
	maxMetadataLen        = 256
)

// config is a Client's configuration: what New's options set.
type config struct {
	prefix        string
	jitter        time.Duration
	maxRetryDelay time.Duration
	ackReplicas   int
	ackTimeout    time.Duration
	allowEviction bool
	handoff       time.Duration
	strict        bool          // WithStrictTokens
	floorIdle     time.Duration // how long a time-token floor outlives its last write: floorIdle, but in tests
	rejoin        time.Duration // WithRejoinDelay (Redlock)
	rejoinSet     bool
	log           *slog.Logger
	observe       func(Event)
	identity      string

	lease leaseConfig // the defaults of every call

	redlock    bool // the client is a Redlock's: leases allow for clock drift
	handoffSet bool // withHandoffTimeout was given, which Redlock refuses
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

// floorIdle is how long, with time tokens (the default), the floor of a
// slot outlives its last write: a server clock stepped back by less than
// this after the floor is gone still issues no repeated token. The floors
// are at most one key per hash slot and prefix, whatever the number of
// names, so a long idle time costs no memory per name (docs/safety.md).
const floorIdle = 7 * 24 * time.Hour

// timeTokens reports whether c issues time tokens (the default).
func (c *config) timeTokens() bool { return !c.strict }

// defaults is a client's configuration before its options.
func defaults() config {
	return config{
		prefix:        scripts.DefaultPrefix,
		jitter:        defaultRetryJitter,
		maxRetryDelay: defaultMaxRetryDelay,
		handoff:       defaultHandoffTimeout,
		floorIdle:     floorIdle,
		log:           slog.New(slog.DiscardHandler),
		identity:      defaultIdentity(),
		lease:         leaseConfig{ttl: DefaultTTL, maxDepth: defaultMaxDepth},
	}
}

// defaultIdentity is "<hostname>/<pid>", cut to what withIdentity accepts.
func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	id := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, host+"/"+strconv.Itoa(os.Getpid()))
	if len(id) > maxMetadataLen || !utf8.ValidString(id) {
		return "pid/" + strconv.Itoa(os.Getpid())
	}
	return id
}

// checkTTL checks a lease's TTL, for WithTTL and [Lease.Extend].
func checkTTL(d time.Duration) error {
	switch {
	case d < minTTL || d > MaxTTL:
		return invalid("TTL %v is outside [%v, %v]", d, minTTL, MaxTTL)
	case d%time.Millisecond != 0:
		return invalid("TTL %v is not a whole number of milliseconds", d)
	}
	return nil
}

// apply applies opts in order, then checks them together (finish).
func (c *config) apply(opts []ClientOption) error {
	for _, o := range opts {
		if o == nil {
			return invalid("nil option")
		}
		if err := o.applyClient(c); err != nil {
			return err
		}
	}
	return c.finish()
}

// finish checks the options together and derives the defaults that
// depend on the TTL, for a client or for one call.
func (c *config) finish() error {
	l := &c.lease
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

func checkMetadata(s string) error { return checkText("metadata", s, maxMetadataLen) }

func checkRetry(s RetryStrategy) error {
	if s == nil {
		return invalid("nil retry strategy")
	}
	if v, ok := s.(interface{ check() error }); ok {
		return v.check()
	}
	return nil
}

// callConfig applies a call's options over the client's defaults. With no
// options it returns the client's own, without copying.
func (c *Client) callConfig(opts []CallOption) (*leaseConfig, error) {
	if len(opts) == 0 {
		return &c.cfg.lease, nil
	}
	cfg := c.cfg
	for _, o := range opts {
		if o == nil {
			return nil, invalid("nil option")
		}
		if err := o.applyCall(&cfg.lease); err != nil {
			return nil, err
		}
	}
	// finish derives the renew interval and the margin from a call's own
	// TTL, unless the client or the call set them explicitly.
	if err := cfg.finish(); err != nil {
		return nil, err
	}
	return &cfg.lease, nil
}

// window is how long after an acquisition is sent its lease is safe: the
// TTL less the safety margin (and, for Redlock, the drift allowance).
func (l *leaseConfig) window() time.Duration { return l.ttl - l.margin - l.drift }
