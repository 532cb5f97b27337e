package reentrant

import (
	"context"
	"log/slog"
	"time"

	"github.com/redfence/redfence/fence"
)

// Event is one thing a Client did, as an observer ([WithObserver]) sees it.
// Kind is "acquired" or "reentered" (a Lock or TryLock started or deepened a
// hold), "not_acquired" (one failed, with Err), "renewed", "renew_failed"
// (Err; the lease is lost only if no renewal succeeds before its deadline),
// "lost" (an ownership ended without Unlock; Err wraps ErrLost) or
// "released" (an Unlock released the lock). Wait is how long the call took,
// for the first three; Token is None for "not_acquired". Hold says what
// the event concerns: "" for a lock ([Client.Lock]), "read" or "write" for
// an [RWMutex]'s leases, "permit" for a [Semaphore]'s.
type Event struct {
	Kind  string
	Name  string
	Hold  string
	Token fence.Token
	Wait  time.Duration
	Err   error
}

// holdNames are Event.Hold's values, by the hold's kind.
var holdNames = map[byte]string{'r': "read", 'w': "write", 's': "permit"}

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
