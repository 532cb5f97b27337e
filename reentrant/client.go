// Package reentrant is a reentrant distributed lock on Redis that hands out
// fencing tokens:
//
//	locks, err := reentrant.New(rdb) // rdb: a go-redis client
//	if err != nil {
//		return err
//	}
//	defer locks.Close()
//	lease, err := locks.Lock(ctx, "invoice-42")
//	if err != nil {
//		return err
//	}
//	defer lease.Unlock(context.Background())
//	// Pass lease.Token() with every write, and stop when lease.Context() ends.
//	return store.Put(lease.Context(), "invoice-42", data, lease.Token())
//
// Each new ownership of a name gets a token higher than every earlier one; a
// reentry by the same owner (a lock call with the lease's Context) keeps it.
// A fenced store (package storage) refuses a write with an older token, so
// a holder paused past its lease cannot overwrite the next one. Leases are
// renewed in the background; a lease's context ends when it is lost,
// decided by a local timer that needs no Redis reply. Waiting is fair: a
// release hands the lock to the oldest waiter. [Client.Do] locks, runs a
// function and unlocks. docs/design.md describes the keys, scripts and
// timing.
package reentrant

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client locks names on one Redis deployment (standalone, Sentinel or
// Cluster), built by [New], or on a majority of independent masters, built
// by [NewRedlock]. It is safe for concurrent use. Close stops its renewals
// and its pub/sub connections, not the go-redis clients it was given.
// docs/design.md describes its connections, docs/deployments.md how it
// rides out a Cluster's slot moves and elections. Only New and NewRedlock
// make a usable Client: every method of a nil *Client, or of a zero Client,
// returns ErrInvalid.
type Client struct {
	be      backend // one deployment (New) or a Redlock's nodes (NewRedlock)
	cfg     config
	ren     *renewer
	checked atomic.Bool

	// deadlines: New's go-redis client enforces a context's deadline
	// itself (honoursDeadlines), so bounded may run calls inline.
	deadlines bool

	reqPrefix string
	reqSeq    atomic.Uint64

	// bg is the context of work that outlives a call (undoing an acquire
	// whose caller gave up, renewals); Close cancels it.
	bg     context.Context
	stopBg context.CancelFunc

	// watch tells a call that sent nothing from one that may have run;
	// retries: a go-redis client may re-send a command on its own.
	watch   *sendWatch
	retries bool

	mu     sync.Mutex
	owns   map[holdKey]*ownership
	names  map[holdKey]int // by name and kind (no owner): how many entries of owns each name has: a refused lock call asks whether this client holds the name (heldHere)
	closed bool
	// unsettled holds the acquisitions whose callers have gone while
	// Redis may keep what they took: an attempt still in flight, or an
	// undo not yet confirmed. Close waits for them (settleWait). emptied,
	// when not nil, is closed when unsettled empties; stopped is set once
	// Close stops waiting, after which nothing new is undone.
	unsettled map[*unsettled]struct{}
	emptied   chan struct{}
	stopped   bool
	// closing is closed when Close begins (undos then retry often);
	// closeDone when it ends, with closeErr its error.
	closing   chan struct{}
	closeDone chan struct{}
	closeErr  error
	wg        sync.WaitGroup // every goroutine of the client (goBackground; the renewer, started under mu; a waiting Lock, track) and of its backend; Add only under mu while !closed (goSettle: while !stopped)
}

// holdKey names one owner's hold on one name in the client's bookkeeping. A
// struct, not a joined string, so that no two pairs can collide.
type holdKey struct {
	owner Owner
	name  string
	kind  byte // the call's hold.kind: a name's lock, RW lock and semaphore are three locks
}

// New returns a Client using rdb. It fails with ErrInvalid when rdb is nil
// (also a typed nil such as a nil *redis.Client), an option is nil, or an
// option's value is out of range; nothing is clamped. New sends no command:
// the server's eviction policy is checked before the first acquisition. It
// adds a hook to a *redis.Client (once per client) that counts the writes
// of its connections, which tells a call that sent nothing from one that
// may have run (ErrOutcomeUnknown).
func New(rdb redis.UniversalClient, opts ...ClientOption) (_ *Client, err error) {
	defer func() { err = pkgErr("new", err) }()
	if rdb == nil {
		return nil, invalid("nil Redis client")
	}
	if v := reflect.ValueOf(rdb); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, invalid("nil %T", rdb)
	}
	cfg := defaults()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	if err := checkAckClient(rdb, cfg); err != nil {
		return nil, err
	}
	if cfg.rejoinSet {
		return nil, invalid("WithRejoinDelay applies to NewRedlock only")
	}
	c, id := build(cfg)
	c.deadlines = honoursDeadlines(rdb)
	c.be = newSingle(c, rdb, id)
	c.watch, c.retries = watchSends(rdb), retries(rdb)
	return c, nil
}

// build makes a Client, without its backend, once its configuration is
// checked: a random ID, returned, names its channel and prefixes its
// request IDs.
func build(cfg config) (*Client, string) {
	var b [8]byte
	_, _ = crand.Read(b[:])
	id := base64.RawURLEncoding.EncodeToString(b[:]) // 11 characters, in every level ID
	bg, stop := context.WithCancel(context.Background())
	c := &Client{
		cfg:       cfg,
		reqPrefix: id + ":",
		bg:        bg,
		stopBg:    stop,
		owns:      make(map[holdKey]*ownership),
		names:     make(map[holdKey]int),
		unsettled: make(map[*unsettled]struct{}),
		closing:   make(chan struct{}),
		closeDone: make(chan struct{}),
	}
	c.ren = newRenewer(c)
	return c, id
}

// Close ends every lease of this client with cause ErrLeaseClosed (both
// ErrLost and ErrClosed), stops its renewals and closes its pub/sub
// connections. First it waits, up to one second, for the undos of
// acquisitions whose callers gave up (ErrOutcomeUnknown, or a context that
// ended with the attempt in flight), so that those locks are free at once
// rather than after their TTL; the locks it could not settle (Redis frozen
// or down) are named in its error, which is ErrOutcomeUnknown. When it
// returns no goroutine of the client runs (a Redis call in flight is waited
// for, up to go-redis's timeouts). The locks stay held until unlocked or
// expired: [Lease.Unlock] still works; every other method returns
// ErrClosed. Close is idempotent: a second call waits for the first and
// returns its error.
func (c *Client) Close() error {
	if err := c.valid(); err != nil {
		return pkgErr("close", err)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.closeDone
		return c.closeErr
	}
	c.closed = true
	close(c.closing)
	owns := c.owns
	c.owns, c.names = map[holdKey]*ownership{}, map[holdKey]int{}
	c.mu.Unlock()
	for _, o := range owns {
		o.end(ErrLeaseClosed)
	}
	c.awaitSettled(settleWait)
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.stopBg()
	err := c.be.close()
	c.wg.Wait()
	c.closeErr = pkgErr("close", join(c.unsettledErr(), err))
	close(c.closeDone)
	return c.closeErr
}

// settleWait bounds how long Close waits for the undos of acquisitions
// whose outcome was unknown: long enough for a live Redis to answer them
// many times over, and short enough that a process shutting down while
// Redis is frozen is not held up for long.
const settleWait = time.Second

// unsettled is one acquisition whose caller has gone while Redis may keep
// what it took.
type unsettled struct{ name string }

// unsettleCall records r's attempt as unsettled, as unsettle does, without
// allocating (r holds the record): until the attempt's lease is made or
// its undo under way, Close waits for it.
func (c *Client) unsettleCall(r *call) *unsettled {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	r.attempt.name = r.name
	c.unsettled[&r.attempt] = struct{}{}
	return &r.attempt
}

// unsettle records that Redis may keep what an acquisition of name took;
// settle says it no longer does (its undo was confirmed, or its attempt
// took nothing, or its lease would have ended anyway). It returns nil once
// Close has stopped waiting: nothing is undone any more.
func (c *Client) unsettle(name string) *unsettled {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	u := &unsettled{name}
	c.unsettled[u] = struct{}{}
	return u
}

// settle removes u, if not nil, from the acquisitions Close waits for.
func (c *Client) settle(u *unsettled) {
	if u == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.unsettled, u)
	if len(c.unsettled) == 0 && c.emptied != nil {
		close(c.emptied)
		c.emptied = nil
	}
}

// awaitSettled waits until no acquisition is unsettled, or d has passed.
func (c *Client) awaitSettled(d time.Duration) {
	c.mu.Lock()
	if len(c.unsettled) == 0 {
		c.mu.Unlock()
		return
	}
	if c.emptied == nil {
		c.emptied = make(chan struct{})
	}
	emptied := c.emptied
	c.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-emptied:
	case <-t.C:
	}
}

// unsettledErr names the locks of the acquisitions still unsettled, or
// returns nil if there are none.
func (c *Client) unsettledErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.unsettled) == 0 {
		return nil
	}
	var names []string
	for u := range c.unsettled {
		names = append(names, quoteName(u.name))
	}
	slices.Sort(names)
	names = slices.Compact(names)
	return fmt.Errorf("%w: acquisitions of %s were not settled within %v (Redis answered neither them nor their "+
		"undo): Redis may keep those locks held until their TTL passes", ErrOutcomeUnknown, strings.Join(names, ", "), settleWait)
}

// sleepUndo waits d before an undo's next try, at most closingRetry once
// Close waits for the undo, and reports false when Close has stopped
// waiting.
func (c *Client) sleepUndo(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.bg.Done():
		return false
	case <-t.C:
		return true
	case <-c.closing:
	}
	return sleep(c.bg.Done(), closingRetry)
}

// closingRetry is how often an undo is retried while Close waits for it.
const closingRetry = 20 * time.Millisecond

// goBackground runs f on its own goroutine, counted for Close. It reports
// false, and does not run f, once the client is closed.
func (c *Client) goBackground(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Go(f)
	return true
}

// goSettle is goBackground for work that settles an acquisition (an undo,
// or the wait for an attempt in flight): it still runs while Close waits
// for those, and reports false only once Close has stopped waiting.
func (c *Client) goSettle(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return false
	}
	c.wg.Go(f)
	return true
}

// ready returns why c cannot take a call on name with ctx, or nil:
// ErrInvalid for a nil or zero Client (see valid), a nil ctx or a bad name;
// ErrClosed after Close. Every method that takes a name checks so first.
func (c *Client) ready(ctx context.Context, name string) error {
	if err := c.valid(); err != nil {
		return err
	}
	if ctx == nil {
		return invalid("nil context")
	}
	if err := checkName(name); err != nil {
		return err
	}
	if c.isClosed() {
		return ErrClosed
	}
	return nil
}

// valid returns ErrInvalid for a nil *Client, or a Client that New or
// NewRedlock did not make (its zero value), on which a method would
// otherwise panic.
func (c *Client) valid() error {
	switch {
	case c == nil:
		return invalid("nil Client")
	case c.be == nil:
		return invalid("Client not made by New or NewRedlock")
	}
	return nil
}

// holdsFor reports whether this client holds name for owner.
func (c *Client) holdsFor(owner Owner, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.owns[holdKey{owner: owner, name: name}]
	return ok
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *Client) reqID() string {
	// One allocation: the prefix and the number appended in one buffer.
	var b [64]byte
	return string(strconv.AppendUint(append(b[:0], c.reqPrefix...), c.reqSeq.Add(1), 36))
}
