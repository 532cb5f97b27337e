package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"

	"github.com/redfence/redfence/reentrant"
)

const (
	renew = "Renewal"
	// renewTTLs is how many TTLs the renewal workload holds its leases for.
	renewTTLs = 3
)

// renewed is one lease of the renewal workload.
type renewed struct {
	alive   func() bool                             // the client still believes it holds the lock
	held    func(ctx context.Context) (bool, error) // Redis says it does
	release func(ctx context.Context) error
}

// renewal holds cfg.leases leases with a short TTL (cfg.renewTTL, renewed at
// a third of it) for three TTLs on one client, and reports whether every
// one stayed alive, by the client's own account and by Redis's, and what
// keeping them alive cost. It runs on redfence, whose leases renew
// themselves, and on redislock with a Refresh loop per lock written as its
// README suggests; the other systems have no renewal to measure.
func renewal(ctx context.Context, e *env) ([]metric, error) {
	var (
		take func(ctx context.Context, i int) (renewed, error)
		done func() error
	)
	if e.multi() {
		return nil, nil
	}
	switch e.sys.name {
	case "redfence":
		c, err := reentrant.New(e.rdb, reentrant.WithTTL(e.cfg.renewTTL))
		if err != nil {
			return nil, err
		}
		take, done = redfenceRenewed(c), c.Close
	case "redislock":
		var stop func()
		take, stop = redislockRenewed(redislock.New(e.rdb), e.cfg.renewTTL)
		done = func() error { stop(); return nil }
	default:
		return nil, nil
	}
	if _, err := begin(ctx, e); err != nil {
		return nil, err
	}
	n := e.cfg.leases
	leases := make([]renewed, n)
	start := time.Now()
	if err := forEach(n, func(i int) (err error) {
		leases[i], err = take(ctx, i)
		return err
	}); err != nil {
		return nil, errors.Join(err, done())
	}
	took := time.Since(start)
	w, err := begin0(ctx, e)
	if err != nil {
		return nil, errors.Join(err, done())
	}
	time.Sleep(renewTTLs * e.cfg.renewTTL)
	we, err := w.end(ctx)
	if err != nil {
		return nil, errors.Join(err, done())
	}
	alive, held := 0, 0
	for _, l := range leases {
		if l.alive() {
			alive++
		}
	}
	var mu sync.Mutex
	err = forEach(n, func(i int) error {
		ok, err := leases[i].held(ctx)
		if ok {
			mu.Lock()
			held++
			mu.Unlock()
		}
		return err
	})
	err = errors.Join(err, forEach(n, func(i int) error {
		if err := leases[i].release(ctx); err != nil && leases[i].alive() {
			return err
		}
		return nil
	}), done())
	if err != nil {
		return nil, err
	}
	secs := we.elapsed.Seconds()
	renewals := float64(n) * we.elapsed.Seconds() / (e.cfg.renewTTL / 3).Seconds()
	return []metric{
		text(renew, fmt.Sprintf("alive after %d TTLs, client's view", renewTTLs), fmt.Sprintf("%d/%d", alive, n)),
		text(renew, fmt.Sprintf("alive after %d TTLs, Redis's view", renewTTLs), fmt.Sprintf("%d/%d", held, n)),
		num(renew, "time to take all leases", unitDur, float64(took)),
		num(renew, "server commands/s", unitRate, float64(we.server.total)/secs),
		num(renew, "server commands per expected renewal", unitCount, float64(we.server.total)/renewals),
		num(renew, "server CPU, % of a core", unitPercent, 100*we.server.cpu/secs),
		num(renew, "client requests/s", unitRate, float64(we.reqs)/secs),
		num(renew, "client CPU, % of a core", unitPercent, 100*we.cpu.Seconds()/secs),
	}, nil
}

// begin0 starts a window without emptying the server first.
func begin0(ctx context.Context, e *env) (*window, error) {
	snap, err := resetStats(ctx, e.admin)
	if err != nil {
		return nil, err
	}
	return &window{e: e, snap: snap, cpu: processCPU(), reqs: e.reqs.Load(), t: time.Now()}, nil
}

func redfenceRenewed(c *reentrant.Client) func(ctx context.Context, i int) (renewed, error) {
	return func(ctx context.Context, i int) (renewed, error) {
		name := "renew-" + strconv.Itoa(i)
		l, err := c.Lock(ctx, name)
		if err != nil {
			return renewed{}, err
		}
		return renewed{
			alive: func() bool { return l.Err() == nil },
			held: func(ctx context.Context) (bool, error) {
				st, err := c.Inspect(ctx, name)
				return st.Held && st.Token == l.Token(), err
			},
			release: l.Unlock,
		}, nil
	}
}

// redislockRenewed takes redislock locks and refreshes each on its own
// goroutine every third of the TTL until it fails or stop is called.
func redislockRenewed(c *redislock.Client, ttl time.Duration) (take func(ctx context.Context, i int) (renewed, error), stop func()) {
	bg, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	take = func(ctx context.Context, i int) (renewed, error) {
		l, err := c.Obtain(ctx, "redislock:renew-"+strconv.Itoa(i), ttl, nil)
		if err != nil {
			return renewed{}, err
		}
		var lost atomic.Bool
		lctx, lcancel := context.WithCancel(bg)
		wg.Go(func() {
			t := time.NewTicker(ttl / 3)
			defer t.Stop()
			for {
				select {
				case <-lctx.Done():
					return
				case <-t.C:
				}
				if err := l.Refresh(lctx, ttl, nil); err != nil && lctx.Err() == nil {
					lost.Store(true)
					return
				}
			}
		})
		return renewed{
			alive: func() bool { return !lost.Load() },
			held: func(ctx context.Context) (bool, error) {
				d, err := l.TTL(ctx)
				return d > 0, err
			},
			release: func(ctx context.Context) error {
				lcancel()
				return l.Release(ctx)
			},
		}, nil
	}
	return take, func() { cancel(); wg.Wait() }
}
