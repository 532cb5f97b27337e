package reentrant

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
)

// maxMultiNames is how many names one LockMulti may take.
const maxMultiNames = scripts.MultiMax

// notAcquiredError is the ErrNotAcquired of a LockMulti refused because
// some of its names were not free for its owner: held by another owner, or
// waited for by a Lock call.
type notAcquiredError struct {
	// Names are the names that refused in the last attempt, sorted. On a
	// Cluster, where names are taken a slot at a time, they are the
	// refusing names of the first slot that refused; on Redlock and a Ring,
	// where they are taken one at a time, the first name that refused.
	Names []string
}

func (e *notAcquiredError) Error() string {
	q := make([]string, len(e.Names))
	for i, n := range e.Names {
		q[i] = quoteName(n)
	}
	return fmt.Sprintf("%v: held by another owner or others wait for it: %s", ErrNotAcquired, strings.Join(q, ", "))
}

// Is makes a notAcquiredError ErrNotAcquired.
func (e *notAcquiredError) Is(target error) bool { return target == ErrNotAcquired }

// MultiLease is one successful LockMulti: one lease on
// each of its names, taken together and held together. Each name has its
// own fencing token, renewal and loss, as a Lease does; the MultiLease
// ends when any of them does. It is safe for concurrent use; unlock it
// once.
type MultiLease struct {
	names  []string // sorted, without duplicates
	leases []*Lease // one per name, in names' order
	ctx    context.Context
	cancel context.CancelCauseFunc
	stops  []func() bool // by name: stop watching its lease

	mu       sync.Mutex // held through an Unlock
	released []bool     // by name: its lease was unlocked (or found not held)
	unlocked bool       // every lease was
}

// Lease returns the lease of one name, nil for a name not in the set: its
// Token, Depth, ID, TTL and Extend are that name's (the Token of nil is
// fence.None). Unlock the MultiLease, not this lease.
func (m *MultiLease) Lease(name string) *Lease { return m.lease(name) }

func (m *MultiLease) lease(name string) *Lease {
	if i, ok := slices.BinarySearch(m.names, name); ok {
		return m.leases[i]
	}
	return nil
}

// Context returns a context that carries the owner (a lock call made with
// it reenters) and every name's token (fence.FromContext; package
// fencehttp sends them all), and that ends when the first lease ends: its
// cause names that lock and wraps its lease's cause (ErrLost and why, as
// [Lease.Context] says), or is ErrReleased after Unlock.
func (m *MultiLease) Context() context.Context { return m.ctx }

// Err returns nil while every lease is live, and otherwise the first name's
// end it finds, in the names' order, as [Lease.Err] reports it: errors.Is(err,
// ErrLost) for a lost lease, ErrReleased after Unlock. Like Lease.Err it
// reads each local deadline itself. A nil MultiLease's Err is ErrNotHeld.
func (m *MultiLease) Err() error {
	if m == nil {
		return opErr("lease", "", errNilLease)
	}
	for i, l := range m.leases {
		if err := l.ended(); err != nil {
			return opErr("lease", m.names[i], err)
		}
	}
	return nil
}

// Unlock releases every name (a name the owner held before goes back to its
// earlier depth), in reverse order, each bounded by ctx as [Lease.Unlock]
// is. It returns nil or each name's error, joined: ErrNotHeld for a lost
// name (counted as released). A name whose release failed otherwise stays
// held, and a further Unlock releases only such names. Once all are
// released the context ends with ErrReleased; a further Unlock, or one of a
// nil MultiLease, is ErrNotHeld.
func (m *MultiLease) Unlock(ctx context.Context) error {
	if m == nil {
		return opErr("unlock", "", errNilLease)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unlocked {
		return opErr("unlock", strings.Join(m.names, ","), fmt.Errorf("%w: unlocked already", ErrNotHeld))
	}
	var errs []error
	left := false
	for i := len(m.leases) - 1; i >= 0; i-- {
		if m.released[i] {
			continue
		}
		// The name's own end must not end the MultiLease as a loss.
		m.stops[i]()
		err := m.leases[i].Unlock(ctx)
		if err == nil || errors.Is(err, ErrNotHeld) {
			m.released[i] = true
		} else {
			left = true
			l, name := m.leases[i], m.names[i]
			m.stops[i] = watchLease(l, name, m.cancel)
		}
		errs = append(errs, err)
	}
	if !left {
		m.unlocked = true
		m.cancel(ErrReleased)
	}
	return joinWith("; ", errs)
}

// newMultiLease makes the MultiLease of leases, one per name, taken with
// the caller's context ctx.
func newMultiLease(ctx context.Context, owner Owner, names []string, leases []*Lease) *MultiLease {
	values := WithOwner(context.WithoutCancel(ctx), owner)
	for i, l := range leases {
		values = fence.NewContext(values, names[i], l.token)
	}
	done, cancel := context.WithCancelCause(context.Background())
	m := &MultiLease{names: names, leases: leases, ctx: leaseCtx{Context: done, values: values}, cancel: cancel,
		released: make([]bool, len(leases))}
	for i, l := range leases {
		m.stops = append(m.stops, watchLease(l, names[i], cancel))
	}
	return m
}

// watchLease ends a MultiLease (cancel) when its lease l of name ends,
// with a cause that names it; the function returned stops watching.
func watchLease(l *Lease, name string, cancel context.CancelCauseFunc) func() bool {
	lc := l.Context()
	return context.AfterFunc(lc, func() {
		cancel(fmt.Errorf("lock %s: %w", quoteName(name), context.Cause(lc)))
	})
}

// LockMulti locks every one of names for ctx's owner, all at once: it
// waits (bounded by ctx and the retry strategy) until every name is free
// for the owner at the same time, and never holds some names while it waits
// for others, so calls naming the same locks in any order cannot deadlock.
// It yields to Lock calls queued on its names. A name the owner holds is
// reentered, with its token, and given back at its earlier depth by Unlock.
// Duplicates count once; opts apply to every name. With a retry strategy
// that never polls (NoRetry) it takes the names only if it can at once.
// A failed or cancelled call leaves nothing held or queued; docs/design.md
// ("Several names at once") says what others may observe meanwhile.
//
// Its errors are Lock's, and ErrInvalid for no names, more than 64 or a bad
// one; an ErrNotAcquired names the names that refused last.
func (c *Client) LockMulti(ctx context.Context, names []string, opts ...CallOption) (*MultiLease, error) {
	return c.lockMultiOp(ctx, "lockmulti", names, opts, true)
}

func (c *Client) lockMultiOp(ctx context.Context, op string, names []string, opts []CallOption, wait bool) (*MultiLease, error) {
	m, err := c.lockMulti(ctx, names, opts, wait)
	if err != nil {
		return nil, opErr(op, strings.Join(sortedNames(names), ","), err)
	}
	return m, nil
}

// sortedNames returns names sorted, without duplicates, in a new slice.
func sortedNames(names []string) []string {
	s := slices.Clone(names)
	slices.Sort(s)
	return slices.Compact(s)
}

// multiCall is one LockMulti or TryLockMulti: the calls of its current
// attempt, one per name in sorted order, and what its waiting needs.
type multiCall struct {
	c       *Client
	names   []string
	owner   Owner
	cfg     *leaseConfig
	rs      []*call
	id      string        // names its queue entries (scripts.WakeMember)
	waiting bool          // LockMulti: the attempts queue to be woken
	again   bool          // an earlier attempt may have queued the call
	wake    chan struct{} // a release of a name it waits for, or a (re)subscription
	be      any           // the backend's state of the wait
}

// multiResult is one all-or-nothing attempt's outcome: a grant per call,
// or the indices of the names that refused and the least left of their
// holders' leases (-1: none is held).
type multiResult struct {
	grants    []acquired
	blocked   []int
	holderTTL time.Duration
}

func (c *Client) lockMulti(ctx context.Context, names []string, opts []CallOption, wait bool) (*MultiLease, error) {
	if err := c.valid(); err != nil {
		return nil, err
	}
	if ctx == nil {
		return nil, invalid("nil context")
	}
	names = sortedNames(names)
	switch {
	case len(names) == 0:
		return nil, invalid("no names")
	case len(names) > maxMultiNames:
		return nil, invalid("%d names, more than maxMultiNames (%d)", len(names), maxMultiNames)
	}
	for _, n := range names {
		if err := c.ready(ctx, n); err != nil {
			return nil, fmt.Errorf("name %s: %w", quoteName(n), err)
		}
	}
	cfg, err := c.callConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.retry != nil && cfg.retry.Backoff(1) <= 0 {
		wait = false // a strategy that never polls makes the call a try
	}
	if err := ctx.Err(); err != nil {
		return nil, join(ErrNotAcquired, err)
	}
	owner, err := ownerFor(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.checkPolicy(ctx); err != nil {
		return nil, err
	}
	m := &multiCall{c: c, names: names, owner: owner, cfg: cfg, id: c.reqID(), waiting: wait, wake: make(chan struct{}, 1)}
	if wait {
		if !c.track() {
			return nil, ErrClosed
		}
		defer c.wg.Done()
	}
	defer c.be.leaveMulti(m)
	start := time.Now()
	var timer *time.Timer
	var refused *notAcquiredError // the last attempt's refusal
	for polls := 1; ; polls++ {
		m.rs = m.rs[:0]
		for _, n := range names {
			m.rs = append(m.rs, c.be.newCall(call{c: c, name: n, cfg: cfg, owner: owner, level: c.reqID()}))
		}
		res, err := c.be.acquireMulti(ctx, m)
		if err != nil {
			if refused != nil && ctxErr(ctx) != nil && !errors.Is(err, ErrOutcomeUnknown) {
				// The context ended during an attempt after a refusal:
				// say what the call was waiting for.
				return nil, join(err, refused)
			}
			return nil, err
		}
		if res.blocked == nil {
			leases, err := c.multiLeases(ctx, m, res)
			if err == nil {
				for i, l := range leases {
					c.observed(names[i], lockHold, start, l, nil)
				}
				return newMultiLease(ctx, owner, names, leases), nil
			}
			if !wait {
				return nil, err
			}
			if err = m.rs[0].keepWaiting(ctx, err); err != nil {
				return nil, err
			}
			continue
		}
		refused = &notAcquiredError{}
		for _, i := range res.blocked {
			refused.Names = append(refused.Names, names[i])
		}
		if !wait {
			return nil, refused
		}
		m.again = true
		delay := m.rs[0].pollDelay(polls, res.holderTTL)
		if delay <= 0 {
			return nil, fmt.Errorf("gave up after %d attempts (%v): %w", polls, cfg.retry, refused)
		}
		// At least every quarter of the queue's expiry, so that the
		// entries stay (each attempt renews them).
		delay = min(delay, (2*cfg.ttl+c.cfg.handoff)/4)
		if timer == nil {
			timer = time.NewTimer(delay)
			defer timer.Stop()
		} else {
			timer.Reset(delay)
		}
		select {
		case <-m.wake:
			// Every waiter of the name woke with this one: on Redlock,
			// trying at once they would split the nodes between them (see
			// quorum.lock); a short random delay spreads them.
			if _, redlock := c.be.(*quorum); redlock {
				if !sleep(ctx.Done(), spread(1)) {
					return nil, join(refused, ctx.Err())
				}
			}
		case <-timer.C:
		case <-ctx.Done():
			return nil, join(refused, ctx.Err())
		case <-c.bg.Done():
			return nil, ErrClosed
		}
	}
}

// multiLeases makes the leases of a granted attempt; when one cannot be
// made (too late, closed), the others are given back and the calls left
// undone.
func (c *Client) multiLeases(ctx context.Context, m *multiCall, res multiResult) ([]*Lease, error) {
	leases := make([]*Lease, 0, len(m.rs))
	for i, r := range m.rs {
		l, err := c.newLease(ctx, r, res.grants[i])
		if a := res.grants[i]; a.settle != nil {
			a.settle(l)
		}
		if err != nil {
			var gerrs []error
			for j, l := range leases {
				if gerr := l.giveBack(ctx, m.rs[j]); gerr != nil {
					gerrs = append(gerrs, fmt.Errorf("giving back %s: %w", quoteName(l.name), gerr))
				}
			}
			if rest := len(m.rs) - i - 1; rest > 0 {
				gerrs = append(gerrs, fmt.Errorf("the %d names after it are undone in the background", rest))
			}
			for j := i + 1; j < len(m.rs); j++ {
				if a := res.grants[j]; a.settle != nil {
					a.settle(nil)
				}
				m.rs[j].undoInBackground()
			}
			return nil, givenBack(ctx, err, join(gerrs...))
		}
		leases = append(leases, l)
	}
	return leases, nil
}

// takeInOrder is an all-or-nothing attempt made of one acquisition per
// name, in the order of rs: the way of a backend that cannot check several
// names in one step (Redlock, a Ring). An attempt refused, or failed, part
// way gives back what it took before it returns.
func takeInOrder(ctx context.Context, be backend, m *multiCall) (multiResult, error) {
	res := multiResult{grants: make([]acquired, len(m.rs))}
	// What was taken is given back as an Unlock would (on Redlock a
	// release on a majority, whose late nodes the grant's settle undoes),
	// before the attempt returns.
	giveBack := func(n int) error {
		var errs []error
		for j, r := range m.rs[:n] {
			l, err := r.c.newLease(ctx, r, res.grants[j])
			if a := res.grants[j]; a.settle != nil {
				a.settle(l)
			}
			if err == nil {
				err = l.giveBack(ctx, r)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("giving back %s: %w", quoteName(r.name), bare(err)))
			}
		}
		return join(errs...)
	}
	for i, r := range m.rs {
		a, err := be.acquire(ctx, r, false)
		if err != nil {
			return res, givenBack(ctx, err, giveBack(i))
		}
		if !a.ok {
			if gerr := giveBack(i); gerr != nil {
				return res, givenBack(ctx, nil, gerr)
			}
			res.blocked, res.holderTTL = []int{i}, a.holderTTL
			return res, nil
		}
		res.grants[i] = a
	}
	return res, nil
}

// giveBack releases a lease of r that no caller saw (a LockMulti attempt
// refused or failed part way), as Unlock does, bounded by one TTL; should
// that fail, the lease ends here (nothing renews it), r's level is removed
// in the background, and the error says so.
func (l *Lease) giveBack(ctx context.Context, r *call) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ttl)
	err := l.Unlock(uctx)
	cancel()
	if err == nil || errors.Is(err, ErrNotHeld) {
		return nil
	}
	l.c.debug("reentrant: giving back a name of a refused LockMulti failed; undoing in the background", "name", l.name, "err", err)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.unlocked {
		l.unlocked = true
		l.end(ErrReleased)
		l.c.dropRef(l.own)
		r.undoInBackground()
	}
	return fmt.Errorf("the release failed, and is retried in the background: %w", bare(err))
}

// errMultiTooDeep is the error of a LockMulti refused because the owner
// holds one of its names at the maximum depth already.
func errMultiTooDeep(name string, depth int64) error {
	return fmt.Errorf("%w: name %s: the hold is %d deep, the maximum (WithMaxDepth)", ErrTooDeep, quoteName(name), depth)
}
