package reentrant

import (
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits of the options that shape one hold.
const (
	// DefaultMaxDepth is the deepest an ownership may reenter unless
	// WithMaxDepth says otherwise. Past it a reentry fails with
	// ErrTooDeep, so runaway recursion stops instead of growing the hold.
	DefaultMaxDepth = 1024
	// MaxDepth is the largest value WithMaxDepth accepts.
	MaxDepth = 1 << 20
	// MaxMetadataLen is the longest metadata WithMetadata accepts, in bytes.
	MaxMetadataLen = 256
)

// WithMetadata stores s with an ownership the call starts (per call or per
// client), for [Client.Inspect] and `redfence inspect` to show: who took
// the lock and why, say "worker-3 job 1842". A reentry keeps the
// ownership's metadata. s must be valid UTF-8 of at most MaxMetadataLen
// bytes without control characters; "" (the default) stores nothing.
func WithMetadata(s string) Option {
	return func(c *config) error {
		if err := checkMetadata(s); err != nil {
			return err
		}
		c.lease.meta = s
		return nil
	}
}

func checkMetadata(s string) error { return checkText("metadata", s) }

// checkText checks a short caller-chosen string stored in Redis: valid
// UTF-8 of at most MaxMetadataLen bytes without control characters.
func checkText(what, s string) error {
	if len(s) > MaxMetadataLen {
		return invalid("%s is %d bytes, the maximum is %d", what, len(s), MaxMetadataLen)
	}
	if !utf8.ValidString(s) {
		return invalid("%s %q is not valid UTF-8", what, s)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return invalid("%s %q contains a control character", what, s)
		}
	}
	return nil
}

// WithMaxDepth bounds how deep an ownership may reenter (per call or per
// client; default DefaultMaxDepth): a Lock or TryLock that would hold the
// lock at a depth above n fails with ErrTooDeep and changes nothing. The
// check is made by Redis, so it holds across every process of the owner.
// n must be from 1 (no reentry) to MaxDepth.
func WithMaxDepth(n int) Option {
	return func(c *config) error {
		if n < 1 || n > MaxDepth {
			return invalid("max depth %d is outside [1, %d]", n, MaxDepth)
		}
		c.lease.maxDepth = int64(n)
		return nil
	}
}

// callConfig applies a call's options over the client's defaults. With no
// options it returns the client's own, without copying.
func (c *Client) callConfig(opts []Option) (*leaseConfig, error) {
	if len(opts) == 0 {
		return &c.cfg.lease, nil
	}
	cfg := c.cfg
	cfg.call = true
	// apply derives the renew interval and the margin from a call's own
	// TTL, unless the client or the call set them explicitly.
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	return &cfg.lease, nil
}

// window is how long after an acquisition is sent its lease is safe: the
// TTL less the safety margin (and, for Redlock, the drift allowance).
func (l *leaseConfig) window() time.Duration { return l.ttl - l.margin - l.drift }
