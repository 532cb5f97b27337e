package reentrant

import (
	"context"
	"log/slog"
	"time"

	"github.com/redfence/redfence/fence"
)

// Event is one thing a Client did, as an observer (see WithObserver) sees
// it. Kind is one of
//
//   - "acquired": a Lock or TryLock started an ownership;
//   - "reentered": a Lock or TryLock deepened its owner's hold;
//   - "not_acquired": a Lock or TryLock returned an error (Err);
//   - "renewed": the renewer extended an ownership's lease;
//   - "renew_failed": a renewal got no answer or an error (Err); the lease
//     is lost only if no renewal succeeds before its deadline;
//   - "lost": an ownership ended without Unlock (Err wraps ErrLost);
//   - "released": an Unlock released the lock (its last level).
//
// Wait is how long the call took, for the first three.
type Event struct {
	Kind  string
	Name  string      // the lock's name
	Token fence.Token // the ownership's token; None for "not_acquired"
	Wait  time.Duration
	Err   error
}

// The kinds of Event.
const (
	kindAcquired    = "acquired"
	kindReentered   = "reentered"
	kindNotAcquired = "not_acquired"
	kindRenewed     = "renewed"
	kindRenewFailed = "renew_failed"
	kindLost        = "lost"
	kindReleased    = "released"
)

// emit reports e to the observer, if any.
func (c *Client) emit(e Event) {
	if c.cfg.observe != nil {
		c.cfg.observe(e)
	}
}

// debug logs at Debug level, when the logger wants it.
func (c *Client) debug(msg string, args ...any) {
	if c.cfg.log.Enabled(context.Background(), slog.LevelDebug) {
		c.cfg.log.Debug(msg, args...)
	}
}
