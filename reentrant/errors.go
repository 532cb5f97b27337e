package reentrant

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
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

	// ErrLost is the cause a lease's context is cancelled with when the
	// lock was found gone or could not be renewed before its TTL ran out.
	// errors.Is(ErrLost, ErrNotHeld) holds.
	ErrLost error = &subError{"reentrant: lease lost", ErrNotHeld}

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
)

// subError is a sentinel that is also another: errors.Is(e, e.parent).
type subError struct {
	msg    string
	parent error
}

func (e *subError) Error() string { return e.msg }
func (e *subError) Unwrap() error { return e.parent }

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
// the lock name. The causes of a joined err become the opError's own.
func opErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	var prior *opError
	if errors.As(err, &prior) && prior.op == op && prior.name == name && err == error(prior) {
		return err
	}
	e := &opError{op: op, name: name}
	if j, ok := err.(interface{ Unwrap() []error }); ok && !isOpError(err) {
		for _, x := range j.Unwrap() {
			if x != nil {
				e.errs = append(e.errs, x)
			}
		}
	} else {
		e.errs = []error{err}
	}
	return e
}

func isOpError(err error) bool {
	_, ok := err.(*opError)
	return ok
}

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

// oneLine is err's message without this package's prefix, on one line.
func oneLine(err error) string {
	var op *opError
	if errors.As(err, &op) && err == error(op) {
		return strings.Join(strings.Fields(strings.ReplaceAll(op.Error(), "\n", "; ")), " ")
	}
	s := strings.TrimPrefix(err.Error(), "reentrant: ")
	s = strings.ReplaceAll(s, "\nreentrant: ", "; ")
	return strings.ReplaceAll(s, "\n", "; ")
}
