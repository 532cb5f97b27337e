package reentrant

import (
	"errors"
	"fmt"
)

// The errors of this package. Test them with errors.Is; each method's doc
// names the ones it returns. A Redis error is returned wrapped, never
// swallowed, so errors.Is also finds go-redis's and net's errors.
var (
	// ErrNotAcquired reports that the lock is held by another owner: at
	// once from TryLock, or from Lock joined with the context's error when
	// the context ended the wait.
	ErrNotAcquired = errors.New("reentrant: lock not acquired")

	// ErrNotHeld reports that the caller does not hold the lock it tried to
	// release or extend: the lease was already unlocked, its lease expired,
	// or another ownership took the lock since.
	ErrNotHeld = errors.New("reentrant: lock not held")

	// ErrLost is the cause a lease's context is cancelled with when the
	// lock was found gone or could not be renewed before its TTL ran out.
	// errors.Is(ErrLost, ErrNotHeld) holds.
	ErrLost = fmt.Errorf("%w: lease lost", ErrNotHeld)

	// ErrReleased is the cause a lease's context is cancelled with after a
	// successful Unlock.
	ErrReleased = errors.New("reentrant: lease released")

	// ErrInvalid reports a bad argument: an empty or over-long name, a TTL
	// out of range, a nil client, an option value out of range.
	ErrInvalid = errors.New("reentrant: invalid argument")

	// ErrNotReplicated reports an acquisition that fewer replicas than
	// WithReplicaAck asks for acknowledged in time. It was undone: no lease
	// and no token were handed out.
	ErrNotReplicated = errors.New("reentrant: acquisition not acknowledged by enough replicas")

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

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
