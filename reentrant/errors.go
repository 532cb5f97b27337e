package reentrant

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redfence/redfence/lua"
)

// The errors of this package. Test them with errors.Is; each method's doc
// names the ones it returns. Every error a method returns is one line of
// the form `reentrant: <operation> "<lock name>": <what>: <cause>`, and
// wraps the Redis error it came from, so errors.As finds go-redis's and
// net's errors.
var (
	// ErrNotAcquired reports that the lock is held by another owner: at
	// once from TryLock, or from Lock with the context's error when the
	// context ended the wait, or when its retry strategy gave up.
	ErrNotAcquired = errors.New("reentrant: not acquired")

	// ErrNotHeld reports that the caller does not hold the lock it tried to
	// release, extend or check: the lease was already unlocked, expired, or
	// another ownership took the lock since.
	ErrNotHeld = errors.New("reentrant: not held")

	// ErrLost is what a lease's context is cancelled with when the lease
	// ends other than by Unlock; the cause is one of ErrGone,
	// ErrUnconfirmed or ErrLeaseClosed, each of which is ErrLost.
	// errors.Is(ErrLost, ErrNotHeld) holds.
	ErrLost error = &subError{"reentrant: lease lost", []error{ErrNotHeld}}

	// ErrGone is the cause of a lease lost because Redis says its ownership
	// no longer holds the lock: its lease ran out there, another ownership
	// took it, an operator forced it ([Client.ForceUnlock]) or deleted the
	// lock's keys. errors.Is(ErrGone, ErrLost) holds.
	ErrGone error = &subError{"reentrant: lease lost: ownership gone from Redis", []error{ErrLost}}

	// ErrUnconfirmed is the cause of a lease lost because no renewal was
	// confirmed before its local deadline (the TTL less the safety margin,
	// on this process's clock): Redis was unreachable, slow or failing
	// over. Redis may still hold the lock for it until the TTL runs out
	// there. errors.Is(ErrUnconfirmed, ErrLost) holds.
	ErrUnconfirmed error = &subError{"reentrant: lease lost: no renewal confirmed in time", []error{ErrLost}}

	// ErrLeaseClosed is the cause of a lease ended by [Client.Close]: its
	// renewal stopped, so the holder must stop too, although Redis keeps
	// the lock until Unlock or the TTL. errors.Is holds for both ErrLost
	// and ErrClosed.
	ErrLeaseClosed error = &subError{"reentrant: lease lost: client closed", []error{ErrLost, ErrClosed}}

	// ErrReleased is the cause a lease's context is cancelled with after a
	// successful Unlock.
	ErrReleased = errors.New("reentrant: lease released")

	// ErrTooDeep reports a reentry that would hold the lock deeper than
	// WithMaxDepth allows. Nothing changed: the hold keeps its depth.
	ErrTooDeep = errors.New("reentrant: reentry too deep")

	// ErrInvalid reports a bad argument: an empty or over-long name, a TTL
	// out of range, a nil client, an option value out of range.
	ErrInvalid = errors.New("reentrant: invalid argument")

	// ErrNotReplicated reports an acquisition that fewer replicas than
	// WithReplicaAck asks for acknowledged in time. It was undone: no lease
	// and no token were handed out.
	ErrNotReplicated = errors.New("reentrant: not acknowledged by enough replicas")

	// ErrEvictionPolicy reports a server whose maxmemory-policy may evict
	// the fencing counter (allkeys-lru, allkeys-lfu, allkeys-random): tokens
	// would restart at 1. Lock and TryLock return it before acquiring
	// anything unless the client was built WithEvictionAllowed or
	// WithTimeTokens.
	ErrEvictionPolicy = errors.New("reentrant: server may evict the fencing counter")

	// ErrClosed reports a call on a Client after Close, and is the cause a
	// lease's context is cancelled with when its Client closes.
	ErrClosed = errors.New("reentrant: client closed")

	// ErrForeign reports a lock key (the lock's hash, its counter or its
	// queue) holding a value redfence did not write: another program's
	// key, or a name collision across prefixes. The call changed nothing,
	// and no lock call on that name succeeds until the key is removed. It
	// is lua.ErrForeign, so either may be tested.
	ErrForeign = lua.ErrForeign

	// ErrOverflow reports a name whose next token would reach 2^53, which
	// the scripts cannot represent exactly: no token is issued. It is
	// lua.ErrOverflow.
	ErrOverflow = lua.ErrOverflow
)

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

// opError is an error of one operation on one lock. It prints on one line,
// the operation and the lock first, then each cause; errors.Is and
// errors.As see every cause.
type opError struct {
	op, name string
	errs     []error
}

// opErr returns nil when err is nil, and otherwise err as an error of op on
// the lock name. The causes of a join become the opError's own.
func opErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	if e, ok := err.(*opError); ok && e.op == op && e.name == name {
		return err
	}
	e := &opError{op: op, name: name, errs: []error{err}}
	if j, ok := err.(*joined); ok && j.sep == causeSep {
		e.errs = j.errs
	}
	return e
}

// The separators of a join: a cause follows what it caused; independent
// failures (fn's and Unlock's in Do) are listed.
const (
	causeSep = ": "
	listSep  = "; "
)

// joined is errors.Join on one line: errs printed in order, separated by
// sep, each without this package's prefix.
type joined struct {
	errs []error
	sep  string
}

// join returns the non-nil errs as one error with causes separated by
// ": ", nil if there are none, and the only one as it is.
func join(errs ...error) error { return joinWith(causeSep, errs) }

func joinWith(sep string, errs []error) error {
	var j joined
	for _, err := range errs {
		if err != nil {
			j.errs = append(j.errs, err)
		}
	}
	switch len(j.errs) {
	case 0:
		return nil
	case 1:
		return j.errs[0]
	}
	j.sep = sep
	return &j
}

func (j *joined) Error() string {
	parts := make([]string, len(j.errs))
	for i, err := range j.errs {
		parts[i] = oneLine(err)
	}
	return strings.Join(parts, j.sep)
}

func (j *joined) Unwrap() []error { return j.errs }

func (e *opError) Error() string {
	var b strings.Builder
	b.WriteString("reentrant: ")
	b.WriteString(e.op)
	b.WriteByte(' ')
	b.WriteString(strconv.Quote(e.name))
	for _, err := range e.errs {
		b.WriteString(": ")
		b.WriteString(oneLine(err))
	}
	return b.String()
}

func (e *opError) Unwrap() []error { return e.errs }

// oneLine is err's message on one line, without this package's prefix
// unless err names its own operation and lock.
func oneLine(err error) string {
	s := err.Error()
	if _, ok := err.(*opError); !ok {
		s = strings.TrimPrefix(s, "reentrant: ")
	}
	s = strings.ReplaceAll(s, "\nreentrant: ", "; ")
	return strings.ReplaceAll(s, "\n", "; ")
}
