// Package reentrant is a reentrant distributed lock on Redis that hands out
// fencing tokens.
//
// A [Client] locks names. Each fresh acquisition (free to held) takes a new
// token from a per-name counter that never resets, so tokens of successive
// ownerships strictly increase; reentry by the current owner returns the same
// token and deepens the hold. Pass the token to a fenced store (see package
// storage) with every write: when a holder is paused past its lease and
// another takes the lock, the paused holder's late write carries an older
// token and is refused.
//
// Ownership is explicit. [Client.Lock] returns a [Lease] whose
// [Lease.Context] carries the owner; a lock call made with that context on
// the same name reenters. A lease is renewed in the background (at TTL/3 by
// default) and, if the lock is found gone or cannot be renewed before the
// TTL runs out, the lease is lost: its context is cancelled with cause
// [ErrLost], so work under it can stop.
//
// The keys of the lock named N, with the default prefix, are: the hash
// redfence:{N} (owner, count, token; it carries the TTL), the counter
// redfence:{N}:fence (no TTL, never reset), the release channel
// redfence:{N}:released and short-lived tombstones redfence:{N}:rel:<request>,
// which let a retried release be recognised. Braces and '%' in N are escaped, so all of
// them share one Cluster slot.
package reentrant

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/lua"
)

// Client locks names on one Redis deployment (standalone, Sentinel or
// Cluster, through go-redis's UniversalClient). It is safe for concurrent
// use. Close it to stop renewals and its pub/sub connection; closing it does
// not close the go-redis client.
type Client struct {
	rdb  redis.UniversalClient
	cfg  config
	note *notifier

	reqPrefix string
	reqSeq    atomic.Uint64

	mu     sync.Mutex
	owns   map[string]*ownership // by owner + "\x00" + name
	closed bool
}

// New returns a Client using rdb. It fails with ErrInvalid when rdb is nil
// or an option is out of range.
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if rdb == nil {
		return nil, invalid("nil Redis client")
	}
	cfg := defaults()
	for _, o := range opts {
		if o == nil {
			return nil, invalid("nil option")
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if err := cfg.finish(); err != nil {
		return nil, err
	}
	if err := checkAckClient(rdb, cfg); err != nil {
		return nil, err
	}
	var b [8]byte
	_, _ = crand.Read(b[:])
	return &Client{
		rdb:       rdb,
		cfg:       cfg,
		note:      newNotifier(rdb),
		reqPrefix: hex.EncodeToString(b[:]) + ":",
		owns:      make(map[string]*ownership),
	}, nil
}

// TTL returns the lease duration of this client's locks.
func (c *Client) TTL() time.Duration { return c.cfg.ttl }

// Close stops every renewal started by this client, cancels its leases'
// contexts with cause ErrClosed and closes its pub/sub connection. The locks
// themselves stay held until unlocked or expired. Later calls fail with
// ErrClosed. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	owns := c.owns
	c.owns = map[string]*ownership{}
	c.mu.Unlock()
	for _, o := range owns {
		o.end(ErrClosed)
	}
	return c.note.close()
}

func (c *Client) reqID() string {
	return c.reqPrefix + strconv.FormatUint(c.reqSeq.Add(1), 36)
}

func (c *Client) check(ctx context.Context, name string) (Owner, error) {
	if err := lua.CheckName(name); err != nil {
		return "", invalid("%v", err)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return "", ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return "", errors.Join(ErrNotAcquired, err)
	}
	return ownerFor(ctx)
}

// TryLock acquires name for ctx's owner, or reenters it if that owner holds
// it, without waiting. A context without an owner gets a fresh one.
//
// It returns ErrNotAcquired when another owner holds the lock, ErrInvalid
// for a bad name or owner, ErrClosed after Close, the context's error
// joined with ErrNotAcquired when ctx has already ended, and Redis errors
// wrapped (lua.ErrWrongType when a key holds a foreign value).
func (c *Client) TryLock(ctx context.Context, name string) (*Lease, error) {
	l, _, err := c.attempt(ctx, name)
	if err == nil && l == nil {
		err = fmt.Errorf("%w: %q is held by another owner", ErrNotAcquired, name)
	}
	return l, err
}

// attempt validates the call and makes the first acquisition attempt. It
// returns the lease when acquired; otherwise, with no error, a retry
// closure for the same owner and keys, and the attempt's reply.
func (c *Client) attempt(ctx context.Context, name string) (*Lease, func() (*Lease, acquired, error), error) {
	owner, err := c.check(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	k := lua.KeysFor(c.cfg.prefix, name)
	try := func() (*Lease, acquired, error) {
		a, err := c.acquire(ctx, k, name, owner)
		if err != nil || !a.OK {
			return nil, a, err
		}
		l, err := c.newLease(ctx, name, k, owner, a)
		return l, a, err
	}
	l, _, err := try()
	return l, try, err
}

// Lock acquires name for ctx's owner, or reenters it if that owner holds
// it, waiting as long as ctx allows. A context without an owner gets a
// fresh one, so two Lock calls with a plain context are two owners and the
// second waits for the first, like sync.Mutex.
//
// Waiting is notified: a full release publishes on the lock's channel and
// wakes the waiters at once. Because an expiry publishes nothing, a waiter
// also wakes when the holder's remaining TTL runs out (plus jitter), and at
// least every max retry delay.
//
// ctx bounds the wait only: once acquired, the lease lives until Unlock,
// loss or Close, whatever happens to ctx (its values are kept). When ctx
// ends first, the error satisfies both errors.Is(err, ErrNotAcquired) and
// errors.Is(err, ctx.Err()). Other errors are as for [Client.TryLock].
//
// Waiting is not fair: there is no queue, and a holder that locks again
// right after unlocking usually wins against the waiters its release woke.
func (c *Client) Lock(ctx context.Context, name string) (*Lease, error) {
	l, try, err := c.attempt(ctx, name)
	if err != nil || l != nil {
		return l, err
	}
	w, err := c.note.watch(ctx, lua.KeysFor(c.cfg.prefix, name).Channel)
	if err != nil {
		return nil, c.waitErr(ctx, name, err)
	}
	defer w.stop()
	timer := time.NewTimer(c.cfg.maxRetryDelay)
	defer timer.Stop()
	// Retry only once the subscription is active, or a release published in
	// between would be missed; the timer bounds the wait if it never is.
	select {
	case <-w.ready:
	case <-timer.C:
	case <-ctx.Done():
		return nil, errors.Join(ErrNotAcquired, ctx.Err())
	}
	for {
		l, a, err := try()
		if err != nil || l != nil {
			return l, err // errors already classified, with any undo's outcome
		}
		timer.Reset(c.retryDelay(a.HolderTTL))
		select {
		case <-w.wake:
		case <-timer.C:
		case <-ctx.Done():
			return nil, errors.Join(ErrNotAcquired, ctx.Err())
		}
	}
}

// retryDelay is how long to sleep when no release is published: until the
// holder's lease runs out, plus jitter, at most maxRetryDelay.
func (c *Client) retryDelay(holderTTL time.Duration) time.Duration {
	d := c.cfg.maxRetryDelay
	if holderTTL >= 0 && holderTTL < d {
		d = holderTTL
	}
	if c.cfg.jitter > 0 {
		d += rand.N(c.cfg.jitter)
	}
	return d
}

func (c *Client) waitErr(ctx context.Context, name string, err error) error {
	if cerr := ctxErr(ctx); cerr != nil {
		return errors.Join(ErrNotAcquired, cerr)
	}
	return fmt.Errorf("reentrant: lock %q: %w", name, err)
}

// acquire runs one attempt. The returned Acquired.HolderTTL is unused when
// OK; the lease's clock starts at sent, before the server could have started
// the TTL, so local expiry estimates err on the early side.
//
// When the attempt fails without a reply from Redis (the context ended, the
// connection broke), the script may still have run: the owner might hold
// the lock, or one more level of it, with no lease to show for it. acquire
// then undoes exactly that request, if it was applied, before returning.
func (c *Client) acquire(ctx context.Context, k lua.Keys, name string, owner Owner) (acquired, error) {
	sent := time.Now()
	req := c.reqID()
	a, acked, err := c.runAcquire(ctx, k, owner, req)
	if err == nil && a.OK && acked < c.cfg.ackReplicas {
		return acquired{}, errors.Join(
			fmt.Errorf("%w: %q: %d of %d replicas within %v", ErrNotReplicated, name, acked, c.cfg.ackReplicas, c.cfg.ackTimeout),
			c.abandon(ctx, k, owner, req))
	}
	if err == nil {
		return acquired{a, sent}, nil
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		err = errors.Join(err, c.abandon(ctx, k, owner, req))
	}
	if cerr := ctxErr(ctx); cerr != nil {
		return acquired{}, errors.Join(ErrNotAcquired, cerr, err)
	}
	return acquired{}, fmt.Errorf("reentrant: acquire %q: %w", name, err)
}

// runAcquire runs the acquire script, followed by WAIT on the same
// connection when replica acknowledgement is on; acked is the number of
// replicas that acknowledged (0 when it is off).
func (c *Client) runAcquire(ctx context.Context, k lua.Keys, owner Owner, req string) (a lua.Acquired, acked int, err error) {
	if c.cfg.ackReplicas == 0 {
		a, err = lua.Acquire(ctx, c.rdb, k, string(owner), c.cfg.ttl, req)
		return a, 0, err
	}
	var node *redis.Client
	switch rdb := c.rdb.(type) {
	case *redis.Client:
		node = rdb
	case *redis.ClusterClient:
		if node, err = rdb.MasterForKey(ctx, k.Lock); err != nil {
			return a, 0, err
		}
	}
	a, n, err := lua.AcquireAcked(ctx, node, k, string(owner), c.cfg.ttl, req, c.cfg.ackReplicas, c.cfg.ackTimeout)
	return a, int(n), err
}

// checkAckClient rejects WithReplicaAck on a client where WAIT cannot follow
// the script on one connection, or would outlast the client's read timeout.
func checkAckClient(rdb redis.UniversalClient, cfg config) error {
	if cfg.ackReplicas == 0 {
		return nil
	}
	var readTimeout time.Duration
	switch rdb := rdb.(type) {
	case *redis.Client:
		readTimeout = rdb.Options().ReadTimeout
	case *redis.ClusterClient:
		readTimeout = rdb.Options().ReadTimeout
	default:
		return invalid("WithReplicaAck needs a *redis.Client or *redis.ClusterClient, not %T", rdb)
	}
	if readTimeout > 0 && cfg.ackTimeout >= readTimeout {
		return invalid("replica acknowledgement timeout %v is not shorter than the client's ReadTimeout %v", cfg.ackTimeout, readTimeout)
	}
	return nil
}

// abandonTimeout bounds the undo of an acquire whose outcome is unknown.
const abandonTimeout = 2 * time.Second

// abandon undoes acquire request req if Redis applied it; it returns nil
// when there was nothing to undo or the undo succeeded, and otherwise an
// error saying the lock may stay held until its TTL runs out.
func (c *Client) abandon(ctx context.Context, k lua.Keys, owner Owner, req string) error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(c.cfg.ttl, abandonTimeout))
	defer cancel()
	if _, err := lua.Abandon(actx, c.rdb, k, string(owner), req); err != nil {
		return fmt.Errorf("reentrant: could not undo an acquire of unknown outcome; the lock may stay held for up to %v: %w", c.cfg.ttl, err)
	}
	return nil
}

type acquired struct {
	lua.Acquired
	sent time.Time
}

// ctxErr is ctx.Err, also in the instant after ctx's deadline passed and
// before ctx.Err reports it: go-redis puts the deadline on the socket, so
// its i/o timeout can arrive first, and the caller must still be able to
// tell that its deadline, not Redis, ended the call.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// Do runs fn while holding name, then unlocks, whatever fn returns. fn gets
// the lease's context, which is cancelled if the lease is lost or when ctx
// ends, and the
// fencing token to pass to every fenced write. Do returns Lock's error, or
// fn's error joined with Unlock's (ErrNotHeld when the lease was lost while
// fn ran). Unlock runs even when ctx has ended, bounded by one TTL.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context, token fence.Token) error) error {
	l, err := c.Lock(ctx, name)
	if err != nil {
		return err
	}
	// fn's context ends with the lease or with ctx, whichever comes first:
	// Do's caller owns fn's lifetime, unlike a bare Lock's.
	fctx, stop := context.WithCancelCause(l.Context())
	defer stop(nil)
	unhook := context.AfterFunc(ctx, func() { stop(context.Cause(ctx)) })
	defer unhook()
	ferr := fn(fctx, l.Token())
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ttl)
	defer cancel()
	return errors.Join(ferr, l.Unlock(uctx))
}

// State is a snapshot of one lock, as [Client.Inspect] reads it.
type State struct {
	Name      string
	Held      bool
	Owner     Owner         // empty when free
	Depth     int64         // reentry depth; 0 when free
	Token     fence.Token   // the current ownership's token; None when free
	TTL       time.Duration // remaining lease; 0 when free, -1 if the key has no expiry
	LastToken fence.Token   // the last token ever issued for the name; None if never
}

// Inspect reads name's state in one atomic step. It does not need or
// change ownership. It returns ErrInvalid for a bad name, ErrClosed after
// Close, lua.ErrWrongType for a foreign value and Redis errors wrapped.
func (c *Client) Inspect(ctx context.Context, name string) (State, error) {
	if err := lua.CheckName(name); err != nil {
		return State{}, invalid("%v", err)
	}
	s, err := lua.Inspect(ctx, c.rdb, lua.KeysFor(c.cfg.prefix, name))
	if err != nil {
		return State{}, fmt.Errorf("reentrant: inspect %q: %w", name, err)
	}
	st := State{Name: name, Held: s.Owner != "", Owner: Owner(s.Owner), Depth: s.Depth, Token: s.Token, LastToken: s.LastToken}
	switch {
	case s.TTL > 0:
		st.TTL = s.TTL
	case st.Held:
		st.TTL = -1
	}
	return st, nil
}
