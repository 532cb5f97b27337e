package reentrant

import (
	"context"
	"log/slog"
	"time"

	"github.com/redfence/redfence/fence"
)

// EventKind says what an [Event] reports.
type EventKind int

// The kinds of Event.
const (
	// Acquired: a Lock or TryLock started an ownership. Wait is how long
	// the call took.
	Acquired EventKind = iota + 1
	// Reentered: a Lock or TryLock deepened its owner's hold. Wait as for
	// Acquired.
	Reentered
	// NotAcquired: a Lock or TryLock returned an error. Wait as for
	// Acquired; Err is the call's error.
	NotAcquired
	// Renewed: the renewer extended an ownership's lease.
	Renewed
	// RenewFailed: a renewal got no answer or an error (Err); the lease
	// is lost only if no renewal succeeds before its deadline.
	RenewFailed
	// Lost: an ownership ended without Unlock (Err wraps ErrLost).
	Lost
	// Released: an Unlock released the lock (its last level).
	Released
)

var kindNames = [...]string{Acquired: "acquired", Reentered: "reentered", NotAcquired: "not_acquired",
	Renewed: "renewed", RenewFailed: "renew_failed", Lost: "lost", Released: "released"}

// String returns the kind's name in snake case, as metrics label it.
func (k EventKind) String() string {
	if k <= 0 || int(k) >= len(kindNames) {
		return "unknown"
	}
	return kindNames[k]
}

// Event is one thing a Client did, as an observer (see WithObserver) sees
// it.
type Event struct {
	Kind  EventKind
	Name  string        // the lock's name
	Token fence.Token   // the ownership's token; None for NotAcquired
	Wait  time.Duration // Acquired, Reentered, NotAcquired: how long the call took
	Err   error         // NotAcquired, RenewFailed, Lost: why
}

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
