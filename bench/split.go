package main

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redfence/redfence/reentrant"
	"github.com/redis/go-redis/v9"
)

const ws = "W1 split of the script time"

//go:embed split.lua
var splitLib string

// splitBlocks is how many alternated blocks of pairs each of split's
// kinds runs; the median block is reported.
const splitBlocks = 21

// split (W1s) splits redfence's script time per uncontended pair (its
// default options, W1's pattern: one name taken and released again and
// again) into what its commands cost and what the rest does, and sets it
// and the strict counter's against fenced-lua's (the targets are ratios
// to it). In the same run, alternating in blocks so that a busy machine
// weighs on all of them alike, it measures the script time per pair of
// redfence itself; of redfence with WithStrictTokens (a prefix of its
// own); of fenced-lua; of split.lua's take and release, which run the
// default's commands with the same keys and arguments and nothing else;
// and of two calls of a function that runs nothing. The first less the
// fourth is what the checks around the commands cost; the fourth less the
// fifth, the commands; the fifth, the calls themselves. Each ratio is the
// median of the ratios of blocks run side by side, the figure least moved
// by a noisy machine. Only redfence on one node runs it, on a server with
// Functions.
func split(ctx context.Context, e *env) ([]metric, error) {
	r, ok := e.lk.(*redfenceLocker)
	if !ok || e.sys.name != "redfence" || e.multi() {
		return nil, nil
	}
	if err := e.rdb.FunctionLoadReplace(ctx, splitLib).Err(); err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "unknown command") {
			return nil, nil // no Functions: nothing to compare with
		}
		return nil, fmt.Errorf("split: load split.lua: %w", err)
	}
	const name = "w1s"
	keys := []string{"redfence:{w1s-probe}", "redfence:{w1s-probe}:q", "redfence:{w1s-probe}:f", "redfence:{w1s-probe}:t"}
	// The arguments redfence sends for a waiting Lock and its Unlock,
	// with values of the same lengths.
	const owner, level = "hcxKnNSi5sm1h4CO-xGH3g", "XsYzBXZ1-sg:1"
	ttl := strconv.FormatInt(e.cfg.ttl.Milliseconds(), 10)
	member := level + "\n500\n" + owner + "\n\npredfence:c:XsYzBXZ1-sg"
	probe := func(take, release string) func(context.Context) error {
		return func(ctx context.Context) error {
			v, err := e.rdb.FCall(ctx, take, keys, owner, ttl, level, member, "61000", "604800000", "", "1024").Result()
			if err != nil {
				return err
			}
			// take's reply is {1, token, 1}; empty's is 0, and its
			// release gets a token of the same length.
			tok := any("1795834268917355")
			if got, ok := v.([]any); ok && len(got) == 3 {
				tok = got[1]
			}
			return e.rdb.FCall(ctx, release, keys, owner, tok, level, "604800000").Err()
		}
	}
	// The strict counter on the same client's server, under a prefix of
	// its own (clients of one prefix share a token mode).
	sc, err := reentrant.New(e.rdb, reentrant.WithTTL(e.cfg.ttl), reentrant.WithStrictTokens(),
		reentrant.WithPrefix("redfence-w1s-strict"))
	if err != nil {
		return nil, fmt.Errorf("split: strict client: %w", err)
	}
	defer sc.Close()
	strict := &redfenceLocker{c: sc}
	fl, err := fencedSystem(true).open(e.rdb, e.cfg.ttl)
	if err != nil {
		return nil, fmt.Errorf("split: fenced-lua: %w", err)
	}
	defer fl.close()
	kinds := []struct {
		what string
		f    func(context.Context) error
	}{
		{"redfence's acquire and release", func(ctx context.Context) error { return pair(ctx, r, name) }},
		{"redfence-strict's acquire and release", func(ctx context.Context) error { return pair(ctx, strict, name) }},
		{"fenced-lua's acquire and release", func(ctx context.Context) error { return pair(ctx, fl, name) }},
		{"the same commands alone", probe("redfence_bench_split_take", "redfence_bench_split_release")},
		{"two calls that run nothing", probe("redfence_bench_split_empty", "redfence_bench_split_empty")},
	}
	for _, k := range kinds {
		for range 50 { // warm up: connections, the library
			if err := k.f(ctx); err != nil {
				return nil, fmt.Errorf("split: %s: %w", k.what, err)
			}
		}
	}
	per := max(e.cfg.pairs/splitBlocks, 100)
	got := make([][]float64, len(kinds))
	for b := range splitBlocks {
		// Every other block backwards, so that no kind always follows
		// the same one.
		for j := range kinds {
			i := j
			if b%2 == 1 {
				i = len(kinds) - 1 - j
			}
			us, err := scriptTimePerPair(ctx, e.admin, per, kinds[i].f)
			if err != nil {
				return nil, fmt.Errorf("split: %s: %w", kinds[i].what, err)
			}
			got[i] = append(got[i], us)
		}
	}
	// A ratio of two kinds: the median of the ratios of blocks run side
	// by side.
	ratio := func(a, b int) float64 {
		r := make([]float64, splitBlocks)
		for k := range r {
			r[k] = got[a][k] / got[b][k]
		}
		slices.Sort(r)
		return r[len(r)/2]
	}
	out := []metric{
		{group: ws, name: "redfence / fenced-lua, median of the blocks' ratios", unit: unitRatio, value: ratio(0, 2), noRatio: true},
		{group: ws, name: "redfence-strict / fenced-lua, median of the blocks' ratios", unit: unitRatio, value: ratio(1, 2), noRatio: true},
		{group: ws, name: "redfence / redfence-strict, median of the blocks' ratios", unit: unitRatio, value: ratio(0, 1), noRatio: true},
	}
	for i, k := range kinds {
		med := slices.Clone(got[i])
		slices.Sort(med)
		out = append(out, metric{group: ws, name: "script time per pair, " + k.what, unit: unitDur, value: med[len(med)/2], noRatio: true})
	}
	return out, nil
}

// scriptTimePerPair runs f n times between a CONFIG RESETSTAT and a read
// of INFO commandstats, and returns the script time per call of f in ns.
func scriptTimePerPair(ctx context.Context, admin *redis.Client, n int, f func(context.Context) error) (float64, error) {
	before, err := resetStats(ctx, admin)
	if err != nil {
		return 0, err
	}
	for range n {
		if err := f(ctx); err != nil {
			return 0, err
		}
	}
	after, err := readStats(ctx, admin)
	if err != nil {
		return 0, err
	}
	return delta(before, after).script * 1e9 / float64(n), nil
}
