package reentrant

import (
	"context"
	"strconv"
	"time"

	"github.com/redfence/redfence/internal/scripts"
)

// RWMutex is a fenced read-write lock on one name: any number of read
// leases, or one write lease. Make one with [Client.RWMutex]; it holds no
// state of its own, so one value may serve every goroutine. A name's
// RWMutex, [Semaphore] and plain lock ([Client.Lock]) are three separate
// locks.
//
// Waiting is fair and notified, as Lock's: a release admits the waiters at
// the head of the name's queue, oldest first, and a waiting writer holds
// back every reader that asks after it, so writers do not starve. A
// cancelled wait leaves nothing queued.
//
// Tokens: a write lease's token is above every token handed out before on
// the name, read leases' included. A read lease's token is the epoch it
// reads: the token of the last write lease granted before it (a fresh
// token when Redis has no record of one). Pass it to [storage.GetAt], which
// refuses a record written with a higher token: a reader paused past its
// lease cannot act on data a newer writer replaced without knowing it.
//
// Reentry follows the owner ([WithOwner], or the lease's Context), as
// Lock's does: the owner of the write lease may also take read leases (a
// downgrade: lock for reading, then unlock the write lease); a read lease's
// owner asking for the write lease is refused with ErrInvalid, since two
// readers upgrading at once would each wait for the other forever.
//
// Every lease is a [Lease]: renewed in the background, lost by its own local
// deadline, its Context ended with it; unlock each exactly once. A Client
// made by [NewRedlock] refuses RWMutex calls with ErrInvalid.
type RWMutex struct {
	c    *Client
	name string
	opts []CallOption
}

// RWMutex returns the read-write lock name; opts apply to each of its calls,
// before the call's own. It sends nothing: a bad name or option is reported
// by the calls, with ErrInvalid.
func (c *Client) RWMutex(name string, opts ...CallOption) *RWMutex {
	return &RWMutex{c: c, name: name, opts: opts}
}

// Lock takes the write lease, waiting as [Client.Lock] does, and fails as
// Lock does; also with ErrInvalid when ctx's owner holds a read lease.
func (m *RWMutex) Lock(ctx context.Context, opts ...CallOption) (*Lease, error) {
	return m.call(ctx, "rwlock", 'w', opts, true)
}

// TryLock takes the write lease if it can without waiting: nobody holds
// the name and nobody waits for it. It fails as [Client.TryLock] does, and
// as Lock.
func (m *RWMutex) TryLock(ctx context.Context, opts ...CallOption) (*Lease, error) {
	return m.call(ctx, "tryrwlock", 'w', opts, false)
}

// RLock takes a read lease, waiting while a writer holds the name or waits
// for it; ctx's owner's read lease is reentered at once, and the write
// lease's owner gets one at once. It fails as [Client.Lock] does.
func (m *RWMutex) RLock(ctx context.Context, opts ...CallOption) (*Lease, error) {
	return m.call(ctx, "rlock", 'r', opts, true)
}

// TryRLock takes a read lease if it can without waiting, and fails as
// [Client.TryLock] does.
func (m *RWMutex) TryRLock(ctx context.Context, opts ...CallOption) (*Lease, error) {
	return m.call(ctx, "tryrlock", 'r', opts, false)
}

func (m *RWMutex) call(ctx context.Context, op string, kind byte, opts []CallOption, wait bool) (*Lease, error) {
	if m == nil {
		return nil, opErr(op, "", invalid("nil *RWMutex"))
	}
	return m.c.sharedCall(ctx, op, m.name, hold{kind: kind}, m.opts, opts, wait)
}

// Inspect reads the lock's state in one atomic step, as [Client.Inspect]
// does: Held when any lease is held, Owner, Token, TTL, Depth and Levels
// the writer's,
// LastToken the token the next write lease's is above, and Holders lists
// every lease's holder, the writer's first (Meta "write") and each reader's
// (Meta "read", Token the epoch it reads).
func (m *RWMutex) Inspect(ctx context.Context) (State, error) {
	if m == nil {
		return State{}, opErr("inspect", "", invalid("nil *RWMutex"))
	}
	return m.c.inspectShared(ctx, m.name, 'w')
}

// Semaphore is a fenced counting semaphore on one name: at most permits
// holders at once. Make one with [Client.Semaphore]; it holds no state of
// its own. The count is stored with the semaphore while any permit is
// held: a call with another count fails with ErrInvalid then.
//
// Each permit holds one of the slots 0 to permits-1 ([Permit.Slot]), and
// its token is above every earlier token of that slot (of the name, in
// fact). Fence per slot: the holder of slot i writes only the keys of its
// slot ([Permit.SlotKey]), so a holder whose permit expired, and whose slot
// has a new holder, has its late writes refused by a fenced store.
//
// An owner holds at most one permit of a semaphore: a call by an owner that
// holds one reenters it (the same slot and token), as Lock reenters a lock.
// A plain context gets a fresh owner per call, so goroutines calling with
// plain contexts take a permit each. Waiting is fair and notified; an
// expired or lost permit frees its slot. A Client made by [NewRedlock]
// refuses Semaphore calls with ErrInvalid.
type Semaphore struct {
	c       *Client
	name    string
	permits int
	opts    []CallOption
}

// maxPermits bounds a semaphore's count: each acquisition reads every live
// permit.
const maxPermits = 1 << 14

// Semaphore returns the semaphore name of permits permits (1 to 16,384);
// opts apply to each of its calls, before the call's own. It sends nothing:
// a bad name, count or option is reported by the calls, with ErrInvalid.
func (c *Client) Semaphore(name string, permits int, opts ...CallOption) *Semaphore {
	return &Semaphore{c: c, name: name, permits: permits, opts: opts}
}

// Acquire takes a permit, waiting as [Client.Lock] does, and fails as Lock
// does; also with ErrInvalid when the count is out of range or another
// than the live semaphore's.
func (s *Semaphore) Acquire(ctx context.Context, opts ...CallOption) (*Permit, error) {
	return s.acquire(ctx, "acquire", true, opts)
}

// TryAcquire takes a permit if one is free and nobody waits, and fails as
// [Client.TryLock] and Acquire do.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...CallOption) (*Permit, error) {
	return s.acquire(ctx, "tryacquire", false, opts)
}

func (s *Semaphore) acquire(ctx context.Context, op string, wait bool, opts []CallOption) (*Permit, error) {
	if s == nil {
		return nil, opErr(op, "", invalid("nil *Semaphore"))
	} else if s.permits < 1 || s.permits > maxPermits {
		return nil, opErr(op, s.name, invalid("%d permits: a semaphore has 1 to %d", s.permits, maxPermits))
	}
	l, err := s.c.sharedCall(ctx, op, s.name, hold{kind: 's', permits: s.permits}, s.opts, opts, wait)
	if err != nil {
		return nil, err
	}
	return &Permit{Lease: l}, nil
}

// Inspect reads the semaphore's state in one atomic step, as
// [Client.Inspect] does: Held when a permit is held, Holders every permit's
// holder (Meta "permit", Slot its slot), LastToken the token the next
// permit's is above.
func (s *Semaphore) Inspect(ctx context.Context) (State, error) {
	if s == nil {
		return State{}, opErr("inspect", "", invalid("nil *Semaphore"))
	}
	return s.c.inspectShared(ctx, s.name, 's')
}

// Permit is one permit of a [Semaphore]: a [Lease] (renewed, lost by its
// own local deadline, unlocked exactly once with Unlock) on one slot.
type Permit struct {
	*Lease
}

// Slot returns the permit's slot, 0 to permits-1: no two live permits
// share one.
func (p *Permit) Slot() int { return p.slot }

// SlotKey returns key as this permit's slot names it ("<key>#slot<N>"): the
// key a fenced store guards for the holder of that slot alone, so that
// slot's tokens rise and a permit that expired is refused once its slot
// has a new holder.
func (p *Permit) SlotKey(key string) string { return key + "#slot" + strconv.Itoa(p.slot) }

// sharedCall is Lock (wait) or TryLock of a hold of a read-write lock or a
// semaphore.
func (c *Client) sharedCall(ctx context.Context, op, name string, h hold, base, opts []CallOption, wait bool) (*Lease, error) {
	if err := c.valid(); err != nil {
		return nil, opErr(op, name, err)
	}
	if len(base) > 0 {
		opts = append(append([]CallOption(nil), base...), opts...)
	}
	start := time.Now()
	var l *Lease
	var err error
	if wait {
		l, err = c.lock(ctx, name, h, opts)
	} else {
		l, err = c.tryLock(ctx, name, h, opts)
	}
	err = opErr(op, name, err)
	c.observed(name, h, start, l, err)
	return l, err
}

// inspectShared reads a read-write lock's (kind 'w') or a semaphore's ('s')
// state.
func (c *Client) inspectShared(ctx context.Context, name string, kind byte) (State, error) {
	if err := c.valid(); err != nil {
		return State{}, opErr("inspect", name, err)
	}
	if err := c.ready(ctx, name); err != nil {
		return State{}, opErr("inspect", name, err)
	}
	s, ok := c.be.(*single)
	if !ok {
		return State{}, opErr("inspect", name, invalid("read-write locks and semaphores are not supported on a Redlock client yet"))
	}
	k := scripts.SharedKeys(s.space.prefix, name, kind, "")
	out := bounded(c, ctx, cleanupBudget/2, func(ctx context.Context) (scripts.SharedState, error) {
		return retryBusy(s, ctx, func(ctx context.Context) (scripts.SharedState, error) {
			return scripts.InspectShared(ctx, s.rdb, k)
		})
	}, nil)
	if out.err != nil {
		return State{}, opErr("inspect", name, out.err)
	}
	return sharedState(name, out.v, s.tokens.Time), nil
}

// sharedState is a shared lock's state as a State.
func sharedState(name string, st scripts.SharedState, time bool) State {
	out := State{Name: name, Waiters: st.Waiters, LastToken: st.Counter}
	if time {
		out.LastToken = st.Floor
	}
	for _, h := range st.Holders {
		x := State{Name: name, Held: true, Owner: h.Owner, Token: h.Token, TTL: millisOf(h.PTTL),
			Depth: int64(len(h.Levels)), Levels: h.Levels}
		switch h.Kind {
		case 'w':
			x.Meta = "write"
			out.Owner, out.Token, out.TTL, out.Depth, out.Levels = x.Owner, x.Token, x.TTL, x.Depth, x.Levels
		case 'r':
			x.Meta = "read"
		default:
			x.Meta, x.Slot = "permit", h.Slot
		}
		out.Held = true
		out.Holders = append(out.Holders, x)
	}
	return out
}

// millisOf is a PTTL in ms as a Duration, saturating.
func millisOf(ms int64) time.Duration {
	if ms > int64(1<<63-1)/int64(time.Millisecond) {
		return 1<<63 - 1
	}
	return time.Duration(ms) * time.Millisecond
}
