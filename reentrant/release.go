package reentrant

// Release: Unlock, and the undo of an acquisition whose caller gave up or
// never saw the reply.

import (
	"context"
	"errors"
	"fmt"
)

// Unlock gives up this lease's level of the hold, and releases the lock,
// handing it to the oldest waiter, when it was the last level. It checks
// the owner, the token and the level, so a stale lease never touches a later
// ownership and a retried Unlock is applied at most once.
//
// A retried Unlock (go-redis's retry after a lost reply, or the caller's
// after an error) is answered as its first attempt while nobody has taken
// the lock since and the lease has not run out: nil once the lock is
// released. Otherwise Unlock cannot tell whether an earlier attempt
// released the lock: it returns ErrNotHeld saying the release is
// unconfirmed, which is not ErrLost.
//
// Unlock returns ErrNotHeld when the lease was already unlocked, when a
// forced unlock ended it (saying who), when the release is unconfirmed
// (above), and, joined with the loss's cause (ErrLost), when it was lost
// before Unlock was called (Redis may have held the lock still, within
// the safety margin, which Unlock then released); ErrInvalid for a nil
// ctx; ErrOutcomeUnknown, with the context's or the network's error, when
// the release was sent and no reply came (call Unlock again to learn the
// outcome); other Redis and network errors, wrapped, when the release was
// not applied (a refused connection sent nothing). It works after the
// Client is closed.
func (l *Lease) Unlock(ctx context.Context) error {
	if l == nil {
		return opErr("unlock", "", errNilLease)
	}
	return opErr("unlock", l.name, l.unlock(ctx))
}

// errUnconfirmed is the error of a release that found the lock no longer
// this ownership's, while nothing says why: its first attempt may have
// released it, and someone may have taken it since.
var errUnconfirmed = fmt.Errorf("%w: release unconfirmed: the lock is no longer this lease's "+
	"(an earlier attempt of this Unlock may have released it, or an operator deleted it, "+
	"and another owner has taken it since)", ErrNotHeld)

func (l *Lease) unlock(ctx context.Context) error {
	if ctx == nil {
		return invalid("nil context")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unlocked {
		return fmt.Errorf("%w: lease already unlocked", ErrNotHeld)
	}
	// A lease lost before Unlock (its local deadline passed) may still hold
	// the lock in Redis, for the safety margin: the release below frees it,
	// but the caller must still learn that its work outlived the lease. A
	// lease of a closed Client is not lost that way: Unlock after Close is
	// how its lock is released.
	lost := l.ended()
	if !errors.Is(lost, ErrLost) || errors.Is(lost, ErrClosed) {
		lost = nil
	}
	var out outcome[released]
	m := l.c.watch.mark()
	if l.c.inline(ctx) { // see ranInline
		r, err := l.release(ctx)
		out = ranInline(ctx, r, err)
	} else {
		out = bounded(l.c, ctx, cleanupBudget/2, l.release, nil)
	}
	r, err := out.v, out.err
	if err != nil {
		return unknown(l.c, out, m, "call Unlock again to learn it")
	}
	l.unlocked = true
	defer l.c.dropRef(l.own)
	switch {
	case r.forced != nil:
		return l.goneFromRedis(r.forced)
	case lost != nil && r.left <= 0:
		l.end(lost)
		how := "Redis still held the lock, which is now released"
		if r.left < 0 {
			how = "Redis no longer held it"
		}
		return fmt.Errorf("%w: the lease was lost before Unlock (%s): %w", ErrNotHeld, how, bare(lost))
	case r.left < 0 && !r.free:
		l.end(errUnconfirmed)
		l.own.end(errUnconfirmed)
		return errUnconfirmed
	}
	// Released: by this call, by an earlier attempt of it (r.free), or
	// one level of a deeper hold.
	l.end(ErrReleased)
	if r.left <= 0 {
		l.own.end(ErrReleased)
		l.c.emit(Event{Kind: kindReleased, Name: l.name, Hold: holdNames[l.own.key.kind], Token: l.token})
	}
	if lost != nil {
		return fmt.Errorf("%w: the lease was lost before Unlock (Redis still held the lock): %w", ErrNotHeld, bare(lost))
	}
	return nil
}

// release sends one release of l's level.
func (l *Lease) release(ctx context.Context) (released, error) {
	return l.c.be.release(ctx, l.ref, l.owner, l.token, l.level)
}

// undo removes the level, and the queue entry, that an attempt of r may
// have left, waiting at most cleanupBudget/2 for Redis; past that the undo
// goes on in the background. It returns nil once Redis confirmed they are
// gone (or never were).
func (r *call) undo() error { return r.c.be.undo(r) }

// undoInBackground removes r's level and queue entry without waiting; it
// reports false when it could not start (Close has stopped waiting).
func (r *call) undoInBackground() bool { return r.c.be.undoInBackground(r) }

// leave takes a waiter of a closing client out of the queue.
func (r *call) leave() error { return r.c.be.leave(r) }
