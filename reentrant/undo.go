package reentrant

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redfence/redfence/lua"
)

// undo removes the level, and the queue entry, that an attempt of r may
// have left, waiting at most CleanupBudget/2 for Redis; past that the undo
// goes on in the background. It returns nil once Redis confirmed they are
// gone (or never were).
func (r *call) undo() error {
	c := r.c
	ctx, cancel := context.WithTimeout(c.bg, CleanupBudget/2)
	defer cancel()
	out := bounded(c, ctx, 0, func(ctx context.Context) (bool, error) {
		return lua.Abandon(context.WithoutCancel(ctx), c.rdb, r.keys, &r.req)
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
	ctx, cancel := context.WithTimeout(context.Background(), CleanupBudget/2)
	defer cancel()
	if _, err := lua.Abandon(ctx, r.c.rdb, r.keys, &r.req); err != nil {
		return fmt.Errorf("leaving the queue: %w", err)
	}
	return nil
}
