package reentrant

// Release: Unlock, and the undo of an acquisition whose caller gave up or
// never saw the reply.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redfence/redfence/lua"
)

// Unlock gives up this lease's level of the hold, and releases the lock,
// handing it to the oldest waiter, when it was the last level. It checks
// the owner, the token and the level, so a stale lease never touches a later
// ownership and a retried Unlock is applied at most once.
//
// Unlock returns ErrNotHeld when the lease was already unlocked, expired or
// superseded; ErrInvalid for a nil ctx; the context's error when ctx ended
// before Redis answered (call Unlock again to learn the outcome); Redis
// errors, wrapped. It works after the Client is closed.
func (l *Lease) Unlock(ctx context.Context) error {
	if l == nil {
		return opErr("unlock", "", fmt.Errorf("%w: nil lease", ErrNotHeld))
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
	out := bounded(l.c, ctx, CleanupBudget/2, func(ctx context.Context) (int64, error) {
		return retryBusy(l.c, ctx, func(ctx context.Context) (int64, error) {
			if l.c.rl != nil {
				return l.c.releaseQuorum(ctx, l.keys, l.owner, l.token, l.level)
			}
			return lua.Release(ctx, l.c.rdb, l.keys, string(l.owner), l.token, l.level, l.c.cfg.tokens)
		})
	}, nil)
	n, err := out.v, out.err
	if err != nil {
		return err
	}
	l.unlocked = true
	if n < 0 {
		err := l.gone()
		l.cancel(l.own.lostErr(ErrGone, "Unlock found it expired, taken, forced or deleted", nil))
		return err
	}
	l.cancel(ErrReleased)
	if n == 0 {
		l.own.end(ErrReleased)
		l.c.emit(Event{Kind: Released, Name: l.name, Token: l.token})
	}
	return nil
}

// undo removes the level, and the queue entry, that an attempt of r may
// have left, waiting at most CleanupBudget/2 for Redis; past that the undo
// goes on in the background. It returns nil once Redis confirmed they are
// gone (or never were).
func (r *call) undo() error {
	c := r.c
	if c.rl != nil {
		r.undoQuorum(r.req) // a node that does not answer keeps the level until its lease ends
		return nil
	}
	ctx, cancel := context.WithTimeout(c.bg, CleanupBudget/2)
	defer cancel()
	out := bounded(c, ctx, 0, func(ctx context.Context) (bool, error) {
		return retryBusy(c, ctx, func(ctx context.Context) (bool, error) {
			return lua.Abandon(context.WithoutCancel(ctx), c.rdb, r.keys, &r.req)
		})
	}, func(_ bool, err error) {
		if err != nil {
			r.undoInBackground()
		}
	})
	switch {
	case !out.known:
		c.debug("reentrant: undo still in flight", "name", r.name, "level", r.req.Level)
		return errors.New("the undo is still in flight")
	case out.err != nil:
		r.undoInBackground()
		return fmt.Errorf("the undo failed and is retried in the background: %w", out.err)
	}
	c.debug("reentrant: undone", "name", r.name, "level", r.req.Level, "removed", out.v)
	return nil
}

// undoInBackground retries removing r's level and queue entry until Redis
// confirms it, the lease it belonged to would have expired anyway, or the
// client closes.
func (r *call) undoInBackground() {
	c, req := r.c, r.req
	if c.rl != nil {
		r.undoQuorum(r.req)
		return
	}
	giveUp := time.Now().Add(r.cfg.ttl)
	c.goBackground(func() {
		for delay := 10 * time.Millisecond; time.Now().Before(giveUp); delay = min(2*delay, time.Second) {
			_, err := lua.Abandon(c.bg, c.rdb, r.keys, &req)
			if err == nil || lua.IsRefusal(err) {
				c.debug("reentrant: undone in the background", "name", r.name, "level", req.Level, "err", err)
				return
			}
			c.debug("reentrant: background undo failed, retrying", "name", r.name, "level", req.Level, "err", err, "delay", delay)
			select {
			case <-c.bg.Done():
				return
			case <-time.After(delay):
			}
		}
		c.cfg.log.Warn("reentrant: gave up undoing an acquisition; its level expires with the lease",
			"name", r.name, "level", req.Level)
	})
}

// leave takes a waiter of a closing client out of the queue (and gives on a
// lock just handed to it), waiting at most CleanupBudget/2 for Redis with
// a client that honours its context; nothing is left in the background.
// Should it fail, the waiter's place is handed over in its turn and
// expires after the claim time.
func (r *call) leave() error {
	if r.c.rl != nil {
		r.undoQuorum(r.req)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), CleanupBudget/2)
	defer cancel()
	_, err := retryBusy(r.c, ctx, func(ctx context.Context) (bool, error) {
		return lua.Abandon(ctx, r.c.rdb, r.keys, &r.req)
	})
	if err != nil {
		return fmt.Errorf("leaving the queue: %w", err)
	}
	return nil
}
