//go:build unix

package reentrant_test

import (
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/redisproc"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/reentrant"
)

// BenchmarkClusterLockUnlockParallel is bench/'s W2 on a three-primary
// Cluster of redis-server processes: 32 goroutines (16 per core on two)
// each locking and releasing a name of its own, the names spread over
// every primary. "batched" has go-redis's defaults, under which
// concurrent calls share pipelines; "unbatched" sets
// ContextTimeoutEnabled, under which each call is one command (these
// contexts have no deadline, so nothing else changes). server-us/op is the
// primaries' CPU (INFO cpu) and client-us/op this process's, per
// Lock+Unlock.
func BenchmarkClusterLockUnlockParallel(b *testing.B) {
	c := redisproc.StartCluster(b, redisproc.ClusterConfig{})
	for _, m := range []struct {
		name    string
		enforce bool
	}{{"batched", false}, {"unbatched", true}} {
		b.Run(m.name, func(b *testing.B) {
			cc := c.Client(func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = m.enforce })
			lc, err := reentrant.New(cc, reentrant.WithPrefix(testenv.Unique(b)), reentrant.WithoutRenewal())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = lc.Close() })
			ctx := b.Context()
			var next atomic.Int64
			server, client := clusterCPU(b, c), processCPU(b)
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				name := "parallel-" + strconv.FormatInt(next.Add(1), 10)
				for pb.Next() {
					l, err := lc.Lock(ctx, name)
					if err != nil {
						b.Error(err)
						return
					}
					if err := l.Unlock(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric((clusterCPU(b, c)-server).Seconds()*1e6/float64(b.N), "server-us/op")
			b.ReportMetric((processCPU(b)-client).Seconds()*1e6/float64(b.N), "client-us/op")
		})
	}
}

// clusterCPU is the CPU time c's primaries have used, by INFO cpu.
func clusterCPU(b *testing.B, c *redisproc.Cluster) time.Duration {
	var total time.Duration
	for _, m := range c.Masters() {
		info, err := m.Client().Info(b.Context(), "cpu").Result()
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.Lines(info) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			if k == "used_cpu_sys" || k == "used_cpu_user" {
				s, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				total += time.Duration(s * float64(time.Second))
			}
		}
	}
	return total
}

// processCPU is the CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
