package reentrant

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redfence/redfence/internal/scripts"
)

// The errors of this package. Test them with errors.Is; each method's doc
// names the ones it returns. Every error a method returns is an *OpError,
// one line of the form `reentrant: <operation> "<lock name>": <what>:
// <cause>`, and wraps the Redis error it came from, so errors.As finds
// go-redis's and net's errors. A lease's context ends with one of these
// errors as its cause, not wrapped.
var (
	// ErrNotAcquired reports that the lock is held by another owner: at
	// once from TryLock, or from Lock with the context's error when the
	// context ended the wait, or when its retry strategy gave up. When
	// that other owner holds it through the same Client, the message says
	// so: a lock call with a context that carries no owner is a new owner,
	// and reenters only with the lease's Context().
	ErrNotAcquired = errors.New("not acquired")

	// ErrOutcomeUnknown reports a call whose command may have run in Redis
	// although no reply says so: its context ended after it was sent, the
	// connection broke before the reply, or Redis froze. For Lock, TryLock,
	// LockMulti and Campaign it means the lock may be held, by this owner
	// and with no lease to show for it, until an undo running in the
	// background removes it (Close waits for those undos; see
	// [Client.Close]) or its TTL passes; for Unlock, Extend and Resign that
	// the change may or may not have been made: call again to learn which.
	// A call that sent nothing (no connection could be made, the client
	// was closed) is never ErrOutcomeUnknown: its error wraps the network
	// error. Neither is a call whose undo Redis confirmed: that one is
	// ErrNotAcquired, or the network error.
	ErrOutcomeUnknown = errors.New("outcome unknown")

	// ErrNotHeld reports that the caller does not hold the lock it tried to
	// release, extend or check: the lease was already unlocked, expired, or
	// another ownership took the lock since.
	ErrNotHeld = errors.New("not held")

	// ErrLost is what a lease's context is cancelled with when the lease
	// ends other than by Unlock; the cause is one of ErrGone,
	// ErrUnconfirmed or ErrLeaseClosed, each of which is ErrLost.
	// errors.Is(ErrLost, ErrNotHeld) holds.
	ErrLost error = &subError{"lease lost", []error{ErrNotHeld}}

	// ErrGone is the cause of a lease lost because Redis says its ownership
	// no longer holds the lock: an operator forced it ([Client.ForceUnlock])
	// or deleted the lock's keys, or another ownership took it. When a
	// forced unlock ended it, the error says who forced it and when (Redis
	// keeps that record until the forced lease would have ended).
	// errors.Is(ErrGone, ErrLost) holds.
	ErrGone error = &subError{"lease lost: ownership gone from Redis", []error{ErrLost}}

	// ErrUnconfirmed is the cause of a lease lost because no renewal was
	// confirmed before its local deadline (the TTL less the safety margin,
	// on this process's clock): Redis was unreachable, slow or failing
	// over. Redis may still hold the lock for it until the TTL runs out
	// there. errors.Is(ErrUnconfirmed, ErrLost) holds.
	ErrUnconfirmed error = &subError{"lease lost: no renewal confirmed in time", []error{ErrLost}}

	// ErrLeaseClosed is the cause of a lease ended by [Client.Close]: its
	// renewal stopped, so the holder must stop too, although Redis keeps
	// the lock until Unlock or the TTL. errors.Is holds for both ErrLost
	// and ErrClosed.
	ErrLeaseClosed error = &subError{"lease lost: client closed", []error{ErrLost, ErrClosed}}

	// ErrReleased is the cause a lease's context is cancelled with after a
	// successful Unlock.
	ErrReleased = errors.New("lease released")

	// ErrTooDeep reports a reentry that would hold the lock deeper than
	// WithMaxDepth allows. Nothing changed: the hold keeps its depth.
	ErrTooDeep = errors.New("reentry too deep")

	// ErrInvalid reports a bad argument: an empty or over-long name, a TTL
	// out of range, a nil client, an option value out of range.
	ErrInvalid = errors.New("invalid argument")

	// ErrNotReplicated reports an acquisition that fewer replicas than
	// WithReplicaAck asks for acknowledged in time. It was undone: no lease
	// and no token were handed out.
	ErrNotReplicated = errors.New("not acknowledged by enough replicas")

	// ErrEvictionPolicy reports a server whose maxmemory-policy may evict
	// the fencing counter (allkeys-lru, allkeys-lfu, allkeys-random): tokens
	// would restart at 1. Lock and TryLock of a client built
	// WithStrictTokens return it before acquiring anything; time tokens
	// (the default) survive an evicted key.
	ErrEvictionPolicy = errors.New("server may evict the fencing counter")

	// ErrClosed reports a call on a Client after Close, and is the cause a
	// lease's context is cancelled with when its Client closes.
	ErrClosed = errors.New("client closed")

	// ErrForeign reports a lock key (the lock's hash, its counter or its
	// queue) holding a value redfence did not write: another program's
	// key, or a name collision across prefixes. The call changed nothing,
	// and no lock call on that name succeeds until the key is removed. It
	// is the same value as redisstore.ErrForeign, which a fenced store's
	// foreign record key reports, so either may be tested.
	ErrForeign = scripts.ErrForeign

	// ErrOverflow reports a name whose next token would reach 2^53, which
	// the scripts cannot represent exactly: no token is issued.
	ErrOverflow = scripts.ErrOverflow
)

// gaveUp is the error of a lock call that gave up after its attempts may
// have taken something (a level, a place in the queue): ErrNotAcquired
// with why and errs once undoErr, the undo's outcome, says Redis confirmed
// the undo, and ErrOutcomeUnknown with them and undoErr when it did not.
func gaveUp(why string, undoErr error, errs ...error) error {
	sentinel := ErrNotAcquired
	if undoErr != nil {
		sentinel = ErrOutcomeUnknown
	}
	head := sentinel
	if why != "" {
		head = fmt.Errorf("%w: %s", sentinel, why)
	}
	return join(append(append([]error{head}, errs...), undoErr)...)
}

// givenBack is the error of a lock call whose attempt was refused (err
// nil) or failed (err) after taking names it then gave back, gerr being
// the give-back's outcome: err once Redis confirmed it, and otherwise
// ErrOutcomeUnknown (never with ErrNotAcquired) with the context's error
// and gerr.
func givenBack(ctx context.Context, err, gerr error) error {
	switch {
	case gerr == nil:
		return err
	case errors.Is(err, ErrOutcomeUnknown):
		return join(err, gerr)
	case errors.Is(err, errTooLate):
		// A waiting call tries again after a grant that came too late.
		return join(ErrOutcomeUnknown, errTooLate, gerr)
	case err == nil || errors.Is(err, ErrNotAcquired):
		return join(ErrOutcomeUnknown, ctxErr(ctx), gerr)
	}
	return join(ErrOutcomeUnknown, err, gerr)
}

// notReplicated is the error of an acquisition fewer replicas
// acknowledged than WithReplicaAck asks for (acked of want within
// timeout), after its undo whose outcome is uerr: ErrNotReplicated once
// Redis confirmed the undo, and with ErrOutcomeUnknown when it did not.
func notReplicated(acked, want int, timeout time.Duration, uerr error) error {
	err := fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, acked, want, timeout)
	if uerr != nil {
		return join(ErrOutcomeUnknown, err, uerr)
	}
	return err
}

// besides returns err, or nil when it is cerr and says nothing more
// (go-redis returns the context's error itself when the context ended the
// call), so that a message says the context's error once.
func besides(err, cerr error) error {
	if cerr != nil && errors.Is(err, cerr) && err.Error() == cerr.Error() {
		return nil
	}
	return err
}

// heldHereHint says why a lock call was refused when its own Client holds
// the name for another owner: reentry goes by the owner a context carries,
// and a plain context carries none, so a second Lock with it waits on the
// first.
const heldHereHint = "held by this Client under another owner; pass the lease's Context() to reenter"

// heldHereError is a Lock's ErrNotAcquired with heldHereHint put after
// "not acquired": "not acquired: <hint>: <the rest, such as the context's
// error>". errors.Is and errors.As see the error it wraps.
type heldHereError struct{ err error }

func (e *heldHereError) Error() string {
	msg := e.err.Error()
	if rest, ok := strings.CutPrefix(msg, ErrNotAcquired.Error()); ok {
		return ErrNotAcquired.Error() + ": " + heldHereHint + rest
	}
	return heldHereHint + ": " + msg
}

func (e *heldHereError) Unwrap() error { return e.err }

// errNilLease is the error of a method called on a nil *Lease.
var errNilLease = fmt.Errorf("%w: nil lease", ErrNotHeld)

// bare is err without its *OpError, for an error quoted inside another
// error about the same lock, which says the operation and name already.
func bare(err error) error {
	if e, ok := err.(*OpError); ok {
		return e.Err
	}
	return err
}

// errTooLate marks an acquisition whose reply came past the lease's safe
// window: it was undone, and a waiting Lock tries again within its context.
var errTooLate = errors.New("past the lease's safe window")

// subError is a sentinel that is also others: errors.Is(e, p) for each of
// its parents p.
type subError struct {
	msg     string
	parents []error
}

func (e *subError) Error() string   { return e.msg }
func (e *subError) Unwrap() []error { return e.parents }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// OpError is the error of one operation on one lock, shaped like
// os.PathError: "reentrant: <Op> "<Name>": <Err>". errors.Is and errors.As
// see through it to Err and its causes.
type OpError struct {
	Op   string // "lock", "trylock", "unlock", "extend", "ttl", "inspect", "force unlock", "do"
	Name string // the lock's name, as given
	Err  error
}

// Error reads "reentrant: <Op> "<Name>": <Err>"; a LockMulti given no
// names reads "reentrant: lockmulti: <Err>".
func (e *OpError) Error() string {
	if e.Name == "" && strings.HasSuffix(e.Op, "multi") {
		return "reentrant: " + e.Op + ": " + e.Err.Error()
	}
	return "reentrant: " + e.Op + " " + quoteName(e.Name) + ": " + e.Err.Error()
}

// maxQuotedName is how much of a lock name an error quotes: a name may be
// MaxNameLen bytes, which would make every error about it a 1 KiB line,
// while names made of a few IDs (two UUIDs and a path are under 100 bytes)
// stay whole.
const maxQuotedName = 128

// quoteName is name as an error message quotes it: in Go syntax, cut after
// maxQuotedName bytes (on a character boundary of valid UTF-8) and then
// followed by its length, as "orders/4…"…(1025 bytes). OpError.Name keeps
// the whole name.
func quoteName(name string) string {
	if len(name) <= maxQuotedName {
		return strconv.Quote(name)
	}
	// name[cut] is the first byte left out: while it continues a
	// character, leave out that character's first bytes too.
	cut := maxQuotedName
	for range utf8.UTFMax - 1 {
		if utf8.RuneStart(name[cut]) {
			break
		}
		cut--
	}
	return strconv.Quote(name[:cut]) + "…(" + strconv.Itoa(len(name)) + " bytes)"
}

// pkgErr returns err, if not nil, with the package's prefix and op: the
// error of a function that acts on no one lock (New, NewRedlock, Close, the
// Check functions); op may be empty.
func pkgErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case op == "":
		err = fmt.Errorf("reentrant: %w", err)
	default:
		err = fmt.Errorf("reentrant: %s: %w", op, err)
	}
	if seenErr != nil {
		seenErr(err)
	}
	return err
}

func (e *OpError) Unwrap() error { return e.Err }

// opErr returns nil when err is nil, and otherwise err as an error of op on
// the lock name (err itself when it is that already). A script's refusal
// of the other token mode's keys is ErrInvalid: a client's setting
// disagrees with another's on the same prefix.
func opErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	if e, ok := err.(*OpError); ok && e.Op == op && e.Name == name {
		return err
	}
	if errors.Is(err, scripts.ErrMode) && !errors.Is(err, ErrInvalid) {
		err = fmt.Errorf("%w: another token mode uses this name's keys: every client of a prefix must use "+
			"WithStrictTokens, or none: %w", ErrInvalid, err)
	}
	if errors.Is(err, scripts.ErrShared) && !errors.Is(err, ErrInvalid) {
		err = fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	e := &OpError{Op: op, Name: name, Err: err}
	if seenErr != nil {
		seenErr(e)
	}
	return e
}

// seenErr, when set (by this package's tests, before any runs), is given
// every error a method returns through opErr or pkgErr, so that a test can
// check every message the test suite produces.
var seenErr func(error)

// join returns the non-nil errs as one error, each followed by its cause
// ("a: b: c"), as fmt.Errorf's %w verbs make it: errors.Is and errors.As
// see every one. It returns nil if there are none, and the only one as it
// is.
func join(errs ...error) error { return joinWith(": ", errs) }

// joinWith is join with another separator: "; " lists independent
// failures (fn's and Unlock's in Do).
func joinWith(sep string, errs []error) error {
	var args []any
	for _, err := range errs {
		if err != nil {
			args = append(args, err)
		}
	}
	switch len(args) {
	case 0:
		return nil
	case 1:
		return args[0].(error)
	}
	return fmt.Errorf(strings.Repeat("%w"+sep, len(args)-1)+"%w", args...)
}
