package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// notCounted are the commands left out of "server commands": this
// program's own (INFO, CONFIG RESETSTAT, ...) and go-redis's connection
// setup, a one-time cost of a new pooled connection.
var notCounted = map[string]bool{
	"info": true, "config|resetstat": true, "flushall": true, "dbsize": true, "client|list": true,
	"hello": true, "client|setinfo": true, "ping": true,
}

// serverSnap is what a workload reads from the server before and after it.
type serverSnap struct {
	calls map[string]int64 // INFO commandstats: calls per command, script-internal ones included
	cpu   float64          // INFO cpu: used_cpu_sys + used_cpu_user, in seconds
	// script is the time Redis spent in script calls (EVAL, EVALSHA,
	// FCALL, FCALL_RO: their commandstats usec, which includes the
	// commands a script runs), in seconds: what a lock's Lua costs the
	// server, a figure that travels between machines (docs/benchmarks.md).
	script float64
}

// scriptCommands are the commands whose commandstats time is a script's.
var scriptCommands = map[string]bool{"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true}

// resetStats zeroes commandstats (CONFIG RESETSTAT) and returns a snapshot
// taken right after, for the CPU baseline.
func resetStats(ctx context.Context, admins ...*redis.Client) (serverSnap, error) {
	for _, admin := range admins {
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			return serverSnap{}, err
		}
	}
	return readStats(ctx, admins...)
}

// readStats reads the servers' statistics, summed over admins.
func readStats(ctx context.Context, admins ...*redis.Client) (serverSnap, error) {
	s := serverSnap{calls: map[string]int64{}}
	for _, admin := range admins {
		info, err := admin.Info(ctx, "commandstats", "cpu").Result()
		if err != nil {
			return serverSnap{}, err
		}
		f := infoFields(info)
		s.cpu += parseFloat(f["used_cpu_sys"]) + parseFloat(f["used_cpu_user"])
		for k, v := range f {
			cmd, ok := strings.CutPrefix(k, "cmdstat_")
			if !ok {
				continue
			}
			calls, rest, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			n, _ := strconv.ParseInt(calls, 10, 64)
			s.calls[cmd] += n
			if scriptCommands[cmd] {
				usec, _, _ := strings.Cut(strings.TrimPrefix(rest, "usec="), ",")
				s.script += parseFloat(usec) / 1e6
			}
		}
	}
	return s, nil
}

// serverDelta is what the server did between two snapshots.
type serverDelta struct {
	calls  map[string]int64
	total  int64   // sum of calls, without notCounted
	cpu    float64 // seconds
	script float64 // seconds in script calls
}

func delta(before, after serverSnap) serverDelta {
	d := serverDelta{calls: map[string]int64{}, cpu: after.cpu - before.cpu, script: after.script - before.script}
	for cmd, n := range after.calls {
		if n -= before.calls[cmd]; n > 0 && !notCounted[cmd] {
			d.calls[cmd] = n
			d.total += n
		}
	}
	return d
}

// breakdown formats d's calls divided by per, most frequent first.
func (d serverDelta) breakdown(per int) string {
	cmds := make([]string, 0, len(d.calls))
	for c := range d.calls {
		cmds = append(cmds, c)
	}
	slices.SortFunc(cmds, func(a, b string) int {
		if d.calls[a] != d.calls[b] {
			return int(d.calls[b] - d.calls[a])
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(cmds))
	for i, c := range cmds {
		parts[i] = fmt.Sprintf("%s %.2f", c, float64(d.calls[c])/float64(max(per, 1)))
	}
	return strings.Join(parts, ", ")
}

// memSnap is the part of INFO memory the memory workload uses.
type memSnap struct {
	used    int64 // used_memory: every byte Redis allocated
	clients int64 // mem_clients_normal: client query and output buffers
	keys    int64
}

func readMem(ctx context.Context, admin *redis.Client) (memSnap, error) {
	info, err := admin.Info(ctx, "memory").Result()
	if err != nil {
		return memSnap{}, err
	}
	f := infoFields(info)
	n, err := admin.DBSize(ctx).Result()
	if err != nil {
		return memSnap{}, err
	}
	used, _ := strconv.ParseInt(f["used_memory"], 10, 64)
	clients, _ := strconv.ParseInt(f["mem_clients_normal"], 10, 64)
	return memSnap{used: used, clients: clients, keys: n}, nil
}

// perItem is the memory added between two snapshots, without client
// buffers, divided by n.
func perItem(before, after memSnap, n int) float64 {
	return float64((after.used-after.clients)-(before.used-before.clients)) / float64(n)
}

func infoFields(info string) map[string]string {
	f := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			f[k] = v
		}
	}
	return f
}

func parseFloat(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return v
}

// processCPU returns this process's user+sys CPU time. Between two calls
// with one system running, it is that system's client cost (plus this
// program's bookkeeping, the same for every system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// percentile returns the nearest-rank p-quantile (0 < p <= 1) of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}
