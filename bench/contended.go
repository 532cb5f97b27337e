package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

const (
	w3 = "W3 contended, one key"
	// contenders is W3's goroutine count, all on one key.
	contenders = 16
	// holdFor is how long W3 holds the lock each time.
	holdFor = time.Millisecond
)

// contention is one W3 run's raw figures.
type contention struct {
	perG      []int           // acquisitions per goroutine
	waits     []time.Duration // from the start of a lock call to its return with the lock
	handoffs  []time.Duration // from a release call's start to the next acquisition
	overlaps  int64           // critical sections entered while another was inside
	unlockErr error           // the first failed release, if any (the run goes on)
	elapsed   time.Duration
}

func (c contention) acquisitions() int {
	n := 0
	for _, a := range c.perG {
		n += a
	}
	return n
}

// contend runs 16 goroutines on one name for d: each takes the lock
// (waiting as long as it takes), holds it 1 ms, releases it, and again.
// An in-process counter of goroutines inside the critical section, raised
// after the lock is granted and lowered before the release is sent, catches
// any overlap: with a correct lock it never exceeds 1.
//
// Handoff is measured on this process's monotonic clock: the holder stores
// the time it starts its release call, and the next holder, once granted,
// subtracts it from its own time.
func contend(ctx context.Context, lk locker, name string, d time.Duration) (contention, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	deadline, _ := ctx.Deadline()
	// go-redis turns the deadline into the socket's, so a call can fail
	// with a timeout a moment before ctx.Err() says the run is over.
	over := func() bool { return ctx.Err() != nil || !time.Now().Before(deadline) }
	var (
		inside      atomic.Int32
		overlaps    atomic.Int64
		lastRelease atomic.Int64 // ns since base; -1 before the first release
		base        = time.Now()
		wg          sync.WaitGroup
		perG        = make([]int, contenders)
		waits       = make([][]time.Duration, contenders)
		hands       = make([][]time.Duration, contenders)
		errs        = make([]error, contenders)
		unlockErrs  = make([]error, contenders)
	)
	lastRelease.Store(-1)
	for g := range contenders {
		wg.Go(func() {
			for ctx.Err() == nil {
				start := time.Now()
				u, err := lk.lock(ctx, name)
				if err != nil {
					if !over() {
						errs[g] = fmt.Errorf("lock %q: %w", name, err)
						cancel()
					}
					return
				}
				got := time.Now()
				waits[g] = append(waits[g], got.Sub(start))
				if r := lastRelease.Load(); r >= 0 {
					hands[g] = append(hands[g], got.Sub(base)-time.Duration(r))
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				time.Sleep(holdFor)
				inside.Add(-1)
				perG[g]++
				lastRelease.Store(int64(time.Since(base)))
				// The release must happen even when the run just ended. A
				// failed one (the lock expired under its holder) ends
				// neither the run nor the hunt for overlaps.
				if err := u.unlock(context.WithoutCancel(ctx)); err != nil && unlockErrs[g] == nil {
					unlockErrs[g] = fmt.Errorf("unlock %q: %w", name, err)
				}
			}
		})
	}
	wg.Wait()
	c := contention{perG: perG, overlaps: overlaps.Load(), unlockErr: errors.Join(unlockErrs...), elapsed: time.Since(base)}
	c.waits, c.handoffs = slices.Concat(waits...), slices.Concat(hands...)
	slices.Sort(c.waits)
	slices.Sort(c.handoffs)
	return c, errors.Join(errs...)
}

// errOverlap reports a broken lock: two critical sections overlapped.
var errOverlap = errors.New("bench: mutual exclusion violated")

// checkExclusion runs W3 for d and fails when two critical sections
// overlapped, a release found the lock gone, or too few critical sections
// ran for the check to mean anything.
func checkExclusion(ctx context.Context, lk locker, name string, d time.Duration) error {
	c, err := contend(ctx, lk, name, d)
	if c.overlaps > 0 {
		return errors.Join(fmt.Errorf("%w: %d of %d critical sections began while another was inside",
			errOverlap, c.overlaps, c.acquisitions()), err, c.unlockErr)
	}
	if err = errors.Join(err, c.unlockErr); err != nil {
		return err
	}
	if n := c.acquisitions(); n < 2*contenders {
		return fmt.Errorf("bench: the exclusion check saw only %d critical sections in %v; it needs at least %d", n, d, 2*contenders)
	}
	return nil
}

// contended (W3) is contend for cfg.duration, measured.
func contended(ctx context.Context, e *env) ([]metric, error) {
	const name = "w3"
	if err := pair(ctx, e.lk, name); err != nil {
		return nil, err
	}
	w, err := begin(ctx, e)
	if err != nil {
		return nil, err
	}
	c, err := contend(ctx, e.lk, name, e.cfg.duration)
	if err = errors.Join(err, c.unlockErr); err != nil {
		return nil, err
	}
	we, err := w.end(ctx)
	if err != nil {
		return nil, err
	}
	if c.overlaps > 0 {
		return nil, fmt.Errorf("%w during W3: %d critical sections began while another was inside", errOverlap, c.overlaps)
	}
	n := c.acquisitions()
	fewest, most := slices.Min(c.perG), slices.Max(c.perG)
	return append([]metric{
		num(w3, "acquisitions/s", unitRate, float64(n)/c.elapsed.Seconds()),
		num(w3, "wait p50", unitDur, float64(percentile(c.waits, 0.50))),
		num(w3, "wait p99", unitDur, float64(percentile(c.waits, 0.99))),
		num(w3, "handoff p50", unitDur, float64(percentile(c.handoffs, 0.50))),
		num(w3, "handoff p99", unitDur, float64(percentile(c.handoffs, 0.99))),
		num(w3, "fairness: fewest/most acquisitions per goroutine", unitRatio, float64(fewest)/float64(max(most, 1))),
		text(w3, "fewest–most acquisitions per goroutine, by round", fmt.Sprintf("%d–%d", fewest, most)),
	}, we.costs(w3, "acquisition", n)...), nil
}
