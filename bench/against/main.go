//go:build ignore

// The program bench/against builds and runs (see its script): the script
// time per uncontended Lock+Unlock pair of this tree's client set against
// an earlier commit's, in one run on one server. The script copies the
// earlier commit to a module of its own, redfencebase.example/redfence, so
// that both builds link into one binary and their blocks alternate: a busy
// machine weighs on both alike, and the ratio of blocks run side by side
// moves far less than separate runs do.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	head "github.com/redfence/redfence/reentrant"
	base "redfencebase.example/redfence/reentrant"
)

func main() {
	addr := flag.String("addr", "", "a private Redis server's address (its statistics are reset)")
	pairs := flag.Int("pairs", 40000, "uncontended pairs per kind, over all blocks")
	blocks := flag.Int("blocks", 101, "alternated blocks; the median block is reported")
	rev := flag.String("base", "base", "the earlier commit's name, for the report")
	flag.Parse()
	if *addr == "" || *pairs < *blocks || *blocks < 1 {
		fmt.Fprintln(os.Stderr, "against: -addr is required, and -pairs must be at least -blocks >= 1")
		os.Exit(2)
	}
	if err := run(*addr, *pairs, *blocks, *rev); err != nil {
		fmt.Fprintln(os.Stderr, "against:", err)
		os.Exit(1)
	}
}

// kind is one client set's uncontended pair.
type kind struct {
	what string
	pair func(context.Context) error
}

func run(addr string, pairs, blocks int, rev string) error {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	const ttl = 10 * time.Second
	// Each client has a prefix of its own: the two builds' keys never
	// meet, whatever their layouts.
	bd, err := base.New(rdb, base.WithTTL(ttl), base.WithPrefix("rfbase"))
	if err != nil {
		return err
	}
	hd, err := head.New(rdb, head.WithTTL(ttl), head.WithPrefix("rfhead"))
	if err != nil {
		return err
	}
	hs, err := head.New(rdb, head.WithTTL(ttl), head.WithPrefix("rfheads"), head.WithStrictTokens())
	if err != nil {
		return err
	}
	basePair := func(c *base.Client) func(context.Context) error {
		return func(ctx context.Context) error {
			l, err := c.Lock(ctx, "w1")
			if err != nil {
				return err
			}
			return l.Unlock(ctx)
		}
	}
	headPair := func(c *head.Client) func(context.Context) error {
		return func(ctx context.Context) error {
			l, err := c.Lock(ctx, "w1")
			if err != nil {
				return err
			}
			return l.Unlock(ctx)
		}
	}
	rw, sem := hd.RWMutex("w1"), hd.Semaphore("w1", 8)
	kinds := []kind{
		{rev + "'s default", basePair(bd)},
		{"this tree's default", headPair(hd)},
		{"this tree with WithStrictTokens", headPair(hs)},
		// A name's lock, RW lock and semaphore are three locks: each pair
		// below takes a hold of its own kind, uncontended.
		{"this tree's RLock+Unlock", func(ctx context.Context) error {
			l, err := rw.RLock(ctx)
			if err != nil {
				return err
			}
			return l.Unlock(ctx)
		}},
		{"this tree's RWMutex.Lock+Unlock", func(ctx context.Context) error {
			l, err := rw.Lock(ctx)
			if err != nil {
				return err
			}
			return l.Unlock(ctx)
		}},
		{"this tree's Acquire+Unlock (8 permits)", func(ctx context.Context) error {
			p, err := sem.Acquire(ctx)
			if err != nil {
				return err
			}
			return p.Unlock(ctx)
		}},
	}
	for _, k := range kinds {
		for range 50 { // warm up: connections, the libraries, the floors
			if err := k.pair(ctx); err != nil {
				return fmt.Errorf("%s: %w", k.what, err)
			}
		}
	}
	per := pairs / blocks
	got := make([][]float64, len(kinds))
	for b := range blocks {
		for j := range kinds {
			// Every other round backwards: no kind always follows another.
			i := j
			if b%2 == 1 {
				i = len(kinds) - 1 - j
			}
			k := kinds[i]
			us, err := scriptTime(ctx, rdb, per, k.pair)
			if err != nil {
				return fmt.Errorf("%s: %w", k.what, err)
			}
			got[i] = append(got[i], us)
		}
	}
	fmt.Printf("script time per uncontended Lock+Unlock pair (INFO commandstats), %d blocks of %d pairs, median block:\n", blocks, per)
	for i, k := range kinds {
		fmt.Printf("  %-42s %6.2f us\n", k.what, median(got[i]))
	}
	fmt.Println("medians of the ratios of blocks run side by side:")
	ratio := func(a, b int) {
		r := make([]float64, blocks)
		for j := range r {
			r[j] = got[a][j] / got[b][j]
		}
		slices.Sort(r)
		fmt.Printf("  %s / %s: %.2f (middle half %.2f-%.2f)\n", kinds[a].what, kinds[b].what, r[blocks/2], r[blocks/4], r[blocks*3/4])
	}
	ratio(1, 0)
	ratio(1, 2)
	ratio(2, 0)
	ratio(3, 1)
	ratio(4, 1)
	ratio(5, 1)
	return nil
}

// scriptTime runs f n times between a CONFIG RESETSTAT and a read of INFO
// commandstats, and returns the time the server spent in script calls
// (FCALL, EVALSHA, EVAL, with the commands they ran) per call of f, in us.
func scriptTime(ctx context.Context, rdb *redis.Client, n int, f func(context.Context) error) (float64, error) {
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return 0, err
	}
	for range n {
		if err := f(ctx); err != nil {
			return 0, err
		}
	}
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var usec float64
	for _, line := range strings.Split(info, "\n") {
		cmd, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch cmd {
		case "cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_evalsha", "cmdstat_eval":
		default:
			continue
		}
		for _, field := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(field, "usec="); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, fmt.Errorf("commandstats %q: %w", line, err)
				}
				usec += x
			}
		}
	}
	return usec / float64(n), nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
