package reentrant

import (
	"context"
	"slices"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
)

// RenewAllNow sends one renewal of every live ownership of c that has none
// in flight, in one batch, waits for the replies and applies them; it
// returns the batch's size. For benchmarks: the background renewer sends
// the same batches, a tick at a time.
func RenewAllNow(c *Client) int {
	r := c.ren
	r.mu.Lock()
	var batch []*ownership
	for i := range r.sched {
		if s := &r.sched[i]; s.o.ctx.Err() == nil && !s.inflight {
			s.inflight = true
			batch = append(batch, s.o)
		}
	}
	r.mu.Unlock()
	r.renew(batch)
	return len(batch)
}

// SetShardLinger sets how long c's shard subscriptions outlive their last
// waiter (5 s otherwise). c must be a Cluster client that has not waited yet.
func SetShardLinger(c *Client, d time.Duration) {
	note := c.be.(*single).note
	note.mu.Lock()
	defer note.mu.Unlock()
	note.shards.linger = d
}

// StopTimer stops the timer that ends l's ownership at its local deadline,
// as a paused process's timer goroutine would not run: only Err's own
// check of the deadline is left.
func StopTimer(l *Lease) {
	l.own.mu.Lock()
	defer l.own.mu.Unlock()
	l.own.timer.Stop()
}

// LocalDeadline returns the local deadline of l's ownership: the send time
// of its last confirmed acquisition or renewal plus the TTL less the
// margin (and drift). The lease ends when it passes.
func LocalDeadline(l *Lease) time.Time {
	l.own.mu.Lock()
	defer l.own.mu.Unlock()
	return l.own.deadline
}

// SetSeenErr makes f see every error the package's methods return through
// opErr and pkgErr; set once, before any test runs.
func SetSeenErr(f func(error)) { seenErr = f }

// What this package's tests use that is not exported: the tuning options
// (package tuning gives them to other packages' tests), the limits, and
// shorthands for what the exported API spells longer.
var (
	WithHandoffTimeout  = withHandoffTimeout
	WithMaxRetryDelay   = withMaxRetryDelay
	WithRetryJitter     = withRetryJitter
	WithRenewInterval   = withRenewInterval
	WithSafetyMargin    = withSafetyMargin
	WithEvictionAllowed = withEvictionAllowed
	WithIdentity        = withIdentity
)

const (
	MinTTL                = minTTL
	CleanupBudget         = cleanupBudget
	DefaultHandoffTimeout = defaultHandoffTimeout
	DefaultRetryJitter    = defaultRetryJitter
	DefaultMaxDepth       = defaultMaxDepth
	MaxDepth              = maxDepthLimit
	MaxMetadataLen        = maxMetadataLen
	MaxElectionValueLen   = maxElectionValueLen
	MaxMultiNames         = maxMultiNames
	MaxOwnerLen           = maxOwnerLen
	MaxPrefixLen          = scripts.MaxPrefixLen
	DefaultPrefix         = scripts.DefaultPrefix
)

// The Event kinds.
const (
	Acquired    = kindAcquired
	Reentered   = kindReentered
	NotAcquired = kindNotAcquired
	Renewed     = kindRenewed
	RenewFailed = kindRenewFailed
	Lost        = kindLost
	Released    = kindReleased
)

// EventKind is the type of Event.Kind.
type EventKind = string

// CheckName, CheckPrefix and CheckOwner report why a lock call would
// refuse the value, as the calls do.
func CheckName(name string) error                 { return pkgErr("", checkName(name)) }
func CheckPrefix(p string) error                  { return pkgErr("", checkPrefix(p)) }
func CheckOwner(o Owner) error                    { return pkgErr("", checkOwner(o)) }
func LinearBackoff(d time.Duration) RetryStrategy { return linearBackoff(d) }

// RetryFunc adapts a function to a RetryStrategy.
type RetryFunc func(n int) time.Duration

func (f RetryFunc) Backoff(n int) time.Duration { return f(n) }

// ForceUnlockToken is ForceUnlock of the ownership with token tok.
func ForceUnlockToken(c *Client, ctx context.Context, name string, tok fence.Token) error {
	_, err := c.ForceUnlock(ctx, name, tok)
	return err
}

// TryLockMulti is LockMulti without waiting, as LockMulti with NoRetry is.
func (c *Client) TryLockMulti(ctx context.Context, names []string, opts ...CallOption) (*MultiLease, error) {
	return c.lockMultiOp(ctx, "trylockmulti", names, opts, false)
}

// TryCampaign is Campaign without waiting.
func (e *Election) TryCampaign(ctx context.Context, value string) (*Term, error) {
	return e.campaign(ctx, value, true)
}

// Done is Context().Done().
func (l *Lease) Done() <-chan struct{}      { return l.Context().Done() }
func (m *MultiLease) Done() <-chan struct{} { return m.ctx.Done() }

// NotAcquiredError is LockMulti's refusal, with the names that refused.
type NotAcquiredError = notAcquiredError

func (m *MultiLease) Names() []string               { return slices.Clone(m.names) }
func (m *MultiLease) Token(name string) fence.Token { return m.lease(name).Token() }

// Election is the election named name, whose campaigns lock with opts.
type Election = election

func (c *Client) Election(name string, opts ...CallOption) *Election { return c.election(name, opts) }

// Unsettled returns how many acquisitions of c Close would wait for now.
func Unsettled(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.unsettled)
}

// Closing reports whether Close has begun on c.
func Closing(c *Client) bool { return c.isClosed() }
