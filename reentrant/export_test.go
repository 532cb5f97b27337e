package reentrant

import "time"

// RenewAllNow sends one renewal of every live ownership of c that has none
// in flight, in one batch, waits for the replies and applies them; it
// returns the batch's size. For benchmarks: the background renewer sends
// the same batches, a tick at a time.
func RenewAllNow(c *Client) int {
	r := c.ren
	r.mu.Lock()
	var batch []*ownership
	for i := range r.sched {
		if s := &r.sched[i]; s.o.ctx.Err() == nil && !s.inflight {
			s.inflight = true
			batch = append(batch, s.o)
		}
	}
	r.mu.Unlock()
	r.renew(batch)
	return len(batch)
}

// SetShardLinger sets how long c's shard subscriptions outlive their last
// waiter (5 s otherwise). c must be a Cluster client that has not waited yet.
func SetShardLinger(c *Client, d time.Duration) {
	note := c.be.(*single).note
	note.mu.Lock()
	defer note.mu.Unlock()
	note.shards.linger = d
}

// StopTimer stops the timer that ends l's ownership at its local deadline,
// as a paused process's timer goroutine would not run: only Err's own
// check of the deadline is left.
func StopTimer(l *Lease) {
	l.own.mu.Lock()
	defer l.own.mu.Unlock()
	l.own.timer.Stop()
}

// LocalDeadline returns the local deadline of l's ownership: the send time
// of its last confirmed acquisition or renewal plus the TTL less the
// margin (and drift). The lease ends when it passes.
func LocalDeadline(l *Lease) time.Time {
	l.own.mu.Lock()
	defer l.own.mu.Unlock()
	return l.own.deadline
}

// SetSeenErr makes f see every error the package's methods return through
// opErr and pkgErr; set once, before any test runs.
func SetSeenErr(f func(error)) { seenErr = f }
