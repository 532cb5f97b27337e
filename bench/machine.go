package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/redis/go-redis/v9"
)

// machine describes where the figures came from.
func machine(ctx context.Context, admin *redis.Client, nodes int) []string {
	srv := map[string]string{}
	if info, err := admin.Info(ctx, "server", "memory").Result(); err == nil {
		srv = infoFields(info)
	}
	lines := []string{
		"CPU: " + cpuModel(),
		fmt.Sprintf("cores: %d (GOMAXPROCS %d), shared by redis-server and the clients", runtime.NumCPU(), runtime.GOMAXPROCS(0)),
		"kernel: " + firstLine("/proc/sys/kernel/osrelease"),
		fmt.Sprintf("redis-server %s (%s), %s on loopback, no persistence", srv["redis_version"], srv["mem_allocator"], instances(nodes)),
		"go: " + runtime.Version(),
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		var deps []string
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/bsm/redislock", "github.com/go-redsync/redsync/v4", "github.com/redis/go-redis/v9":
				deps = append(deps, d.Path+" "+d.Version)
			}
		}
		lines = append(lines, "modules: "+strings.Join(deps, ", "))
	}
	if out, err := exec.CommandContext(ctx, "git", "-C", "..", "log", "-1", "--format=%h %s").Output(); err == nil {
		lines = append(lines, "redfence: "+strings.TrimSpace(string(out)))
	}
	return lines
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func firstLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 256))
	line, _, _ := strings.Cut(string(b), "\n")
	return line
}

func instances(n int) string {
	if n == 1 {
		return "one instance"
	}
	return fmt.Sprintf("%d instances", n)
}
