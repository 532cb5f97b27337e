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
// Unlock returns ErrNotHeld when the lease was already unlocked, expired or
// superseded, and also, joined with the loss's cause (ErrLost), when it
// was lost before Unlock was called although Redis still held the lock
// (within the safety margin), which Unlock then released; ErrInvalid for a
// nil ctx; the context's error when ctx ended before Redis answered (call
// Unlock again to learn the outcome); Redis errors, wrapped. It works after
// the Client is closed.
func (l *Lease) Unlock(ctx context.Context) error {
	if l == nil {
		return opErr("unlock", "", errNilLease)
	}
	return opErr("unlock", l.name, l.unlock(ctx))
}

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
	var out outcome[int64]
	if l.c.inline(ctx) { // see ranInline
		n, err := l.release(ctx)
		out = ranInline(ctx, n, err)
	} else {
		out = bounded(l.c, ctx, CleanupBudget/2, l.release, nil)
	}
	n, err := out.v, out.err
	if err != nil {
		return err
	}
	l.unlocked = true
	defer l.c.dropRef(l.own)
	if n < 0 {
		return l.goneFromRedis(extendResult{}) // the lease ends with its ownership's cause
	}
	l.end(ErrReleased)
	if n == 0 {
		l.own.end(ErrReleased)
		l.c.emit(Event{Kind: Released, Name: l.name, Token: l.token})
	}
	if lost != nil {
		return fmt.Errorf("%w: the lease was lost before Unlock (Redis still held the lock, which is now released): %w", ErrNotHeld, bare(lost))
	}
	return nil
}

// release sends one release of l's level.
func (l *Lease) release(ctx context.Context) (int64, error) {
	return l.c.be.release(ctx, l.ref, l.owner, l.token, l.level)
}

// undo removes the level, and the queue entry, that an attempt of r may
// have left, waiting at most CleanupBudget/2 for Redis; past that the undo
// goes on in the background. It returns nil once Redis confirmed they are
// gone (or never were).
func (r *call) undo() error { return r.c.be.undo(r) }

// undoInBackground removes r's level and queue entry without waiting.
func (r *call) undoInBackground() { r.c.be.undoInBackground(r) }

// leave takes a waiter of a closing client out of the queue.
func (r *call) leave() error { return r.c.be.leave(r) }
