package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redfence/redfence/reentrant"
)

// The read-write lock's and the semaphore's workloads (rw64, sem8). Only
// redfence has them: they run on the "redfence" system on one node (its
// default options but the TTL, -ttl) and skip every other. Each client
// set stands for separate processes: a reentrant.Client of its own on a
// go-redis client of its own (its own pool and pub/sub connection), whose
// commands count in the system's client requests. Every call has a plain
// context: a fresh owner per call.
const (
	wrw  = "RW64 one RWMutex, 64 readers + 1 writer"
	wsem = "SEM8 one Semaphore(8), 32 goroutines"

	// rw64: rwReaders readers spread over rwProcs clients, the writer on a
	// client of its own.
	rwReaders = 64
	rwProcs   = 4
	// rwReadFor and rwWriteFor are how long a read and a write lease are
	// held (time.Sleep); the writer pauses rwPause between writes.
	rwReadFor  = time.Millisecond
	rwWriteFor = time.Millisecond
	rwPause    = 20 * time.Millisecond

	// sem8: semWorkers goroutines spread over semProcs clients, holding
	// a permit of semPermits for semHoldFor each time.
	semPermits = 8
	semWorkers = 32
	semProcs   = 4
	semHoldFor = 2 * time.Millisecond
)

// procs opens n redfence clients, each on a go-redis client of its own to
// e's server, counted in e.reqs; done closes them.
func procs(e *env, n int) (cs []*reentrant.Client, done func() error, err error) {
	addr := e.rdb.Options().Addr
	var closers []func() error
	done = func() error {
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			errs = append(errs, closers[i]())
		}
		return errors.Join(errs...)
	}
	for range n {
		rdb := newClient(addr, e.reqs)
		closers = append(closers, rdb.Close)
		c, err := reentrant.New(rdb, reentrant.WithTTL(e.cfg.ttl))
		if err != nil {
			return nil, nil, errors.Join(err, done())
		}
		closers = append(closers, c.Close)
		cs = append(cs, c)
	}
	return cs, done, nil
}

// sharedOn reports whether rw64 and sem8 run on e.
func sharedOn(e *env) bool { return e.sys.name == "redfence" && !e.multi() }

// warmFor is the unmeasured run before each measured one: every client's
// scripts loaded, eviction policy checked, pub/sub subscribed.
func warmFor(d time.Duration) time.Duration { return min(d/4, 500*time.Millisecond) }

// take takes one hold and returns its release.
type take func(ctx context.Context) (release func(context.Context) error, err error)

// rwFigures are one rw64 run's raw figures.
type rwFigures struct {
	reads      []int           // per reader
	readWaits  []time.Duration // from the start of an RLock (or Lock) call to its return with the lease
	writeWaits []time.Duration // the same for the writer's Lock
	// handoffs are, for each write lease, the time from the start of the
	// last reader's release call before it to its grant: what of the
	// writer's wait the lock's handoff took once the readers were done.
	handoffs    []time.Duration
	mostReaders int32 // readers inside at once, at most
	overlaps    int64 // a writer inside with anyone else, or (exclusive) two readers
	unlockErr   error
	elapsed     time.Duration
}

func (f rwFigures) readsTotal() int {
	n := 0
	for _, r := range f.reads {
		n += r
	}
	return n
}

// runRW runs rwReaders readers, reader g taking its hold with read(g)
// and holding it rwReadFor, and one writer taking its hold with write,
// holding it rwWriteFor and pausing rwPause, all again and again for d.
// shared says readers may be inside together (a read-write lock); without
// it (one plain lock for all) any two inside at once is an overlap. The
// counters are raised after a grant and lowered before the release is
// sent, so they see a subset of what Redis holds: an overlap is real.
func runRW(ctx context.Context, read func(g int) take, write take, shared bool, d time.Duration) (rwFigures, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	deadline, _ := ctx.Deadline()
	over := func() bool { return ctx.Err() != nil || !time.Now().Before(deadline) }
	var (
		readers, writer atomic.Int32
		most            atomic.Int32
		overlaps        atomic.Int64
		wg              sync.WaitGroup
		base            = time.Now()
		reads           = make([]int, rwReaders)
		rwaits          = make([][]time.Duration, rwReaders)
		wwaits, hands   []time.Duration
		lastRelease     atomic.Int64 // a reader's release call's start, ns since base; -1 before the first
		errs            = make([]error, rwReaders+1)
		unlockErrs      = make([]error, rwReaders+1)
	)
	fail := func(i int, what string, err error) {
		if !over() {
			errs[i] = fmt.Errorf("%s: %w", what, err)
			cancel()
		}
	}
	lastRelease.Store(-1)
	release := func(i int, what string, rel func(context.Context) error) {
		if err := rel(context.WithoutCancel(ctx)); err != nil && unlockErrs[i] == nil {
			unlockErrs[i] = fmt.Errorf("%s unlock: %w", what, err)
		}
	}
	for g := range rwReaders {
		tk := read(g)
		wg.Go(func() {
			for ctx.Err() == nil {
				start := time.Now()
				rel, err := tk(ctx)
				if err != nil {
					fail(g, "reader", err)
					return
				}
				rwaits[g] = append(rwaits[g], time.Since(start))
				n := readers.Add(1)
				if writer.Load() != 0 || !shared && n != 1 {
					overlaps.Add(1)
				}
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(rwReadFor)
				readers.Add(-1)
				reads[g]++
				lastRelease.Store(int64(time.Since(base)))
				release(g, "reader", rel)
			}
		})
	}
	wg.Go(func() {
		t := time.NewTimer(rwPause)
		defer t.Stop()
		for ctx.Err() == nil {
			start := time.Now()
			rel, err := write(ctx)
			if err != nil {
				fail(rwReaders, "writer", err)
				return
			}
			got := time.Now()
			wwaits = append(wwaits, got.Sub(start))
			if r := lastRelease.Load(); r >= 0 {
				hands = append(hands, got.Sub(base)-time.Duration(r))
			}
			if writer.Add(1) != 1 || readers.Load() != 0 {
				overlaps.Add(1)
			}
			time.Sleep(rwWriteFor)
			writer.Add(-1)
			release(rwReaders, "writer", rel)
			if !sleepCtx(ctx, t, rwPause) {
				return
			}
		}
	})
	wg.Wait()
	f := rwFigures{reads: reads, readWaits: slices.Concat(rwaits...), writeWaits: wwaits, handoffs: hands, mostReaders: most.Load(),
		overlaps: overlaps.Load(), unlockErr: errors.Join(unlockErrs...), elapsed: time.Since(base)}
	slices.Sort(f.readWaits)
	slices.Sort(f.writeWaits)
	slices.Sort(f.handoffs)
	return f, errors.Join(errs...)
}

// rw64 runs one RWMutex under 64 readers (hold 1 ms, again at once) and
// one writer (hold 1 ms, then 20 ms off) for cfg.sharedDur, then, in a
// window of its own, the same 65 goroutines on one plain Lock (readers
// serialised): the baseline the read-write lock's gain is a ratio to.
// Readers are on 4 clients (16 each), the writer on a fifth.
func rw64(ctx context.Context, e *env) ([]metric, error) {
	if !sharedOn(e) {
		return nil, nil
	}
	cs, done, err := procs(e, rwProcs+1)
	if err != nil {
		return nil, err
	}
	rc, wc := cs[:rwProcs], cs[rwProcs]
	rwTakes := func(name string) (func(int) take, take) {
		read := func(g int) take {
			m := rc[g%rwProcs].RWMutex(name)
			return func(ctx context.Context) (func(context.Context) error, error) {
				l, err := m.RLock(ctx)
				if err != nil {
					return nil, err
				}
				return l.Unlock, nil
			}
		}
		m := wc.RWMutex(name)
		return read, func(ctx context.Context) (func(context.Context) error, error) {
			l, err := m.Lock(ctx)
			if err != nil {
				return nil, err
			}
			return l.Unlock, nil
		}
	}
	lockTakes := func(name string) (func(int) take, take) {
		lock := func(c *reentrant.Client) take {
			return func(ctx context.Context) (func(context.Context) error, error) {
				l, err := c.Lock(ctx, name)
				if err != nil {
					return nil, err
				}
				return l.Unlock, nil
			}
		}
		return func(g int) take { return lock(rc[g%rwProcs]) }, lock(wc)
	}
	type variant struct {
		group  string
		shared bool
		takes  func(string) (func(int) take, take)
	}
	var out []metric
	var figs []rwFigures
	for _, v := range []variant{{wrw + ": RWMutex", true, rwTakes}, {wrw + ": Lock baseline", false, lockTakes}} {
		name := "rw64-" + map[bool]string{true: "rw", false: "lock"}[v.shared]
		read, write := v.takes(name)
		if _, err := runRW(ctx, read, write, v.shared, warmFor(e.cfg.sharedDur)); err != nil {
			return nil, errors.Join(fmt.Errorf("%s warm-up: %w", v.group, err), done())
		}
		w, err := begin(ctx, e)
		if err != nil {
			return nil, errors.Join(err, done())
		}
		f, err := runRW(ctx, read, write, v.shared, e.cfg.sharedDur)
		if err = errors.Join(err, f.unlockErr); err != nil {
			return nil, errors.Join(fmt.Errorf("%s: %w", v.group, err), done())
		}
		we, err := w.end(ctx)
		if err != nil {
			return nil, errors.Join(err, done())
		}
		if f.overlaps > 0 {
			return nil, errors.Join(fmt.Errorf("%w during %s: %d critical sections began while a writer (or, on the plain lock, anyone) was inside",
				errOverlap, v.group, f.overlaps), done())
		}
		n := f.readsTotal()
		figs = append(figs, f)
		out = append(out,
			num(v.group, "reader acquisitions/s", unitRate, float64(n)/f.elapsed.Seconds()),
			num(v.group, "reader wait p50", unitDur, float64(percentile(f.readWaits, 0.50))),
			num(v.group, "reader wait p99", unitDur, float64(percentile(f.readWaits, 0.99))),
			num(v.group, "writer wait p50", unitDur, float64(percentile(f.writeWaits, 0.50))),
			num(v.group, "writer wait p99", unitDur, float64(percentile(f.writeWaits, 0.99))),
			num(v.group, "writer wait max", unitDur, float64(percentile(f.writeWaits, 1))),
			num(v.group, "writer handoff p50 (last reader's release call to the grant)", unitDur, float64(percentile(f.handoffs, 0.50))),
			num(v.group, "writer handoff p99", unitDur, float64(percentile(f.handoffs, 0.99))),
			num(v.group, "writes", unitWhole, float64(len(f.writeWaits))),
			num(v.group, "most readers inside at once", unitWhole, float64(f.mostReaders)),
			text(v.group, "fewest–most acquisitions per reader, by round", fmt.Sprintf("%d–%d", slices.Min(f.reads), slices.Max(f.reads))),
		)
		out = append(out, we.costs(v.group, "acquisition", n+len(f.writeWaits))...)
	}
	if err := done(); err != nil {
		return nil, err
	}
	rw, lk := figs[0], figs[1]
	ratio := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return a / b
	}
	return append(out,
		num(wrw, "reader acquisitions/s, RWMutex / Lock", unitRatio,
			ratio(float64(rw.readsTotal())/rw.elapsed.Seconds(), float64(lk.readsTotal())/lk.elapsed.Seconds())),
		num(wrw, "writer wait p99, RWMutex / Lock", unitRatio,
			ratio(float64(percentile(rw.writeWaits, 0.99)), float64(percentile(lk.writeWaits, 0.99)))),
	), nil
}

// semFigures are one sem8 run's raw figures.
type semFigures struct {
	perG        []int
	waits       []time.Duration
	mostHolders int32 // goroutines inside at once, at most
	slotClashes int64 // a permit granted a slot another live permit held, or one out of range
	unlockErr   error
	elapsed     time.Duration
}

// runSem runs semWorkers goroutines, goroutine g acquiring with acquire(g),
// holding semHoldFor, releasing, again and again for d. The holders'
// counter, raised after a grant and lowered before the release is sent,
// never exceeds semPermits with a correct semaphore; nor do two live
// permits share a slot.
func runSem(ctx context.Context, acquire func(g int) func(context.Context) (*reentrant.Permit, error), d time.Duration) (semFigures, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	deadline, _ := ctx.Deadline()
	over := func() bool { return ctx.Err() != nil || !time.Now().Before(deadline) }
	var (
		inside, most atomic.Int32
		clashes      atomic.Int64
		slots        [semPermits]atomic.Int32
		wg           sync.WaitGroup
		base         = time.Now()
		perG         = make([]int, semWorkers)
		waits        = make([][]time.Duration, semWorkers)
		errs         = make([]error, semWorkers)
		unlockErrs   = make([]error, semWorkers)
	)
	for g := range semWorkers {
		acq := acquire(g)
		wg.Go(func() {
			for ctx.Err() == nil {
				start := time.Now()
				p, err := acq(ctx)
				if err != nil {
					if !over() {
						errs[g] = fmt.Errorf("acquire: %w", err)
						cancel()
					}
					return
				}
				waits[g] = append(waits[g], time.Since(start))
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				s := p.Slot()
				ok := s >= 0 && s < semPermits
				if !ok || slots[s].Add(1) != 1 {
					clashes.Add(1)
				}
				time.Sleep(semHoldFor)
				if ok {
					slots[s].Add(-1)
				}
				inside.Add(-1)
				perG[g]++
				if err := p.Unlock(context.WithoutCancel(ctx)); err != nil && unlockErrs[g] == nil {
					unlockErrs[g] = fmt.Errorf("unlock: %w", err)
				}
			}
		})
	}
	wg.Wait()
	f := semFigures{perG: perG, waits: slices.Concat(waits...), mostHolders: most.Load(), slotClashes: clashes.Load(),
		unlockErr: errors.Join(unlockErrs...), elapsed: time.Since(base)}
	slices.Sort(f.waits)
	return f, errors.Join(errs...)
}

// sem8 runs one Semaphore of 8 permits under 32 goroutines (4 clients of
// 8), each acquiring, holding 2 ms and releasing, for cfg.sharedDur:
// throughput, the spread of grants over the goroutines (FIFO waiting
// should make it even), the wait, and a check that never more than 8 hold
// a permit at once.
func sem8(ctx context.Context, e *env) ([]metric, error) {
	if !sharedOn(e) {
		return nil, nil
	}
	cs, done, err := procs(e, semProcs)
	if err != nil {
		return nil, err
	}
	acquire := func(g int) func(context.Context) (*reentrant.Permit, error) {
		s := cs[g%semProcs].Semaphore("sem8", semPermits)
		return func(ctx context.Context) (*reentrant.Permit, error) { return s.Acquire(ctx) }
	}
	if _, err := runSem(ctx, acquire, warmFor(e.cfg.sharedDur)); err != nil {
		return nil, errors.Join(fmt.Errorf("warm-up: %w", err), done())
	}
	w, err := begin(ctx, e)
	if err != nil {
		return nil, errors.Join(err, done())
	}
	f, err := runSem(ctx, acquire, e.cfg.sharedDur)
	if err = errors.Join(err, f.unlockErr); err != nil {
		return nil, errors.Join(err, done())
	}
	we, err := w.end(ctx)
	if err = errors.Join(err, done()); err != nil {
		return nil, err
	}
	if f.mostHolders > semPermits || f.slotClashes > 0 {
		return nil, fmt.Errorf("%w during sem8: %d holders at once (limit %d), %d permits granted a slot already held",
			errOverlap, f.mostHolders, semPermits, f.slotClashes)
	}
	n := 0
	for _, a := range f.perG {
		n += a
	}
	fewest, most := slices.Min(f.perG), slices.Max(f.perG)
	return append([]metric{
		num(wsem, "acquisitions/s", unitRate, float64(n)/f.elapsed.Seconds()),
		num(wsem, "wait p50", unitDur, float64(percentile(f.waits, 0.50))),
		num(wsem, "wait p99", unitDur, float64(percentile(f.waits, 0.99))),
		num(wsem, "wait max", unitDur, float64(percentile(f.waits, 1))),
		num(wsem, "fairness: fewest/most acquisitions per goroutine", unitRatio, float64(fewest)/float64(max(most, 1))),
		text(wsem, "fewest–most acquisitions per goroutine, by round", fmt.Sprintf("%d–%d", fewest, most)),
		num(wsem, "most holders at once (limit 8)", unitWhole, float64(f.mostHolders)),
	}, we.costs(wsem, "acquisition", n)...), nil
}
