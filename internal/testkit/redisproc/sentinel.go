//go:build unix

package redisproc

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel's timing in a [Sentinels] group: a primary is subjectively down
// after SentinelDownAfter without a reply; a failover that stalls is retried
// after twice SentinelFailoverTimeout. Sentinel also counts the time it takes
// to connect to a primary it has just promoted, so under a loaded CPU a
// shorter SentinelDownAfter fails over from that primary too.
const (
	SentinelDownAfter       = time.Second
	SentinelFailoverTimeout = 2 * time.Second
	// SentinelMasterName is the name the sentinels monitor the primary as.
	SentinelMasterName = "redfence"
	// failoverWait bounds [Sentinels.KillPrimary]'s wait for a new primary.
	failoverWait = 30 * time.Second
)

// Sentinels is a primary, its replicas and the Sentinel processes watching
// them, all on loopback. Its methods, like [Server]'s, report failure through
// the test and must be called from the test's goroutine. Sentinels must not
// be copied.
type Sentinels struct {
	t         testing.TB
	servers   []*Server // every data server, the first primary first
	sentinels []*sentinelProc

	mu        sync.Mutex
	primary   *Server
	unplanned int
}

// StartSentinels starts a primary, replicas replicas of it and sentinels
// Sentinel processes (redis-server --sentinel) monitoring it as
// SentinelMasterName with a quorum of a majority. It returns once every
// replica is in sync and every sentinel knows every replica and every other
// sentinel, so a failover can start. Everything is killed by PID when the
// test ends. It skips or fails as [Start] does without redis-server. opts
// apply to every data server, the primary and its replicas.
func StartSentinels(t testing.TB, replicas, sentinels int, opts ...Option) *Sentinels {
	t.Helper()
	if replicas < 1 || sentinels < 1 {
		t.Fatalf("redisproc: %d replicas and %d sentinels: want at least one of each", replicas, sentinels)
	}
	g := &Sentinels{t: t}
	primary := Start(t, opts...)
	g.servers, g.primary = []*Server{primary}, primary
	for range replicas {
		g.servers = append(g.servers, Start(t, append(slices.Clone(opts), WithReplicaOf(primary))...))
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for _, r := range g.servers[1:] {
		r.WaitSync(ctx)
	}
	// Started after the sync: a sentinel asks the primary for its replicas
	// as soon as it connects, and otherwise only every 10 seconds.
	conf := fmt.Sprintf("sentinel resolve-hostnames no\n"+
		"sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
		"sentinel down-after-milliseconds %[1]s %[4]d\n"+
		"sentinel failover-timeout %[1]s %[5]d\n",
		SentinelMasterName, primary.port, sentinels/2+1, SentinelDownAfter.Milliseconds(), SentinelFailoverTimeout.Milliseconds())
	for range sentinels {
		g.sentinels = append(g.sentinels, startSentinel(t, primary.bin, conf))
	}
	g.waitKnown(replicas, sentinels-1)
	return g
}

// Addrs returns the sentinels' addresses, for redis.FailoverOptions.
func (g *Sentinels) Addrs() []string {
	addrs := make([]string, len(g.sentinels))
	for i, s := range g.sentinels {
		addrs[i] = s.addr()
	}
	return addrs
}

// Primary returns the current primary, as of the last [Sentinels.KillPrimary].
func (g *Sentinels) Primary() *Server {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.primary
}

// Servers returns every data server, alive or not; the first primary first.
func (g *Sentinels) Servers() []*Server { return append([]*Server(nil), g.servers...) }

// SentinelPIDs returns the PIDs of the sentinel processes.
func (g *Sentinels) SentinelPIDs() []int {
	pids := make([]int, len(g.sentinels))
	for i, s := range g.sentinels {
		pids[i] = s.proc.cmd.Process.Pid
	}
	return pids
}

// Client returns a go-redis failover client of the group (MasterName
// SentinelMasterName, SentinelAddrs every sentinel, DisableIdentity: Redis
// 7.0 has no CLIENT SETINFO), closed when the test ends. configure may
// change any option.
func (g *Sentinels) Client(configure ...func(*redis.FailoverOptions)) *redis.Client {
	o := &redis.FailoverOptions{MasterName: SentinelMasterName, SentinelAddrs: g.Addrs(), DisableIdentity: true}
	for _, f := range configure {
		f(o)
	}
	c := redis.NewFailoverClient(o)
	g.t.Cleanup(func() { _ = c.Close() })
	return c
}

// KillPrimary kills the current primary with SIGKILL and returns the new
// primary once the sentinels agree on it (see [Sentinels.AwaitFailover]).
// The killed server stays down; restart it with [Sentinels.Rejoin].
func (g *Sentinels) KillPrimary() *Server {
	g.t.Helper()
	old := g.Primary()
	old.Kill()
	return g.AwaitFailover(old)
}

// AwaitFailover waits until every sentinel names a primary other than old
// and that server says it is one, and returns it. It fails the test if that
// takes more than 30 seconds.
func (g *Sentinels) AwaitFailover(old *Server) *Server {
	g.t.Helper()
	return g.await(old)
}

// AwaitPrimary waits until every sentinel names the same primary and that
// server says it is one, and returns it. It differs from [Sentinels.Primary]
// when Sentinel failed over on its own, as it may when a primary answers
// slowly. It fails the test if that takes more than 30 seconds.
func (g *Sentinels) AwaitPrimary() *Server {
	g.t.Helper()
	return g.await(nil)
}

// Unplanned returns how many failovers Sentinel made on its own, as far as
// seen: each time AwaitPrimary (also called by Rejoin and WaitReplicas)
// found a primary that no KillPrimary or AwaitFailover had returned.
func (g *Sentinels) Unplanned() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.unplanned
}

// await waits until the sentinels agree on a primary other than old (which
// may be nil) and records it.
func (g *Sentinels) await(old *Server) *Server {
	g.t.Helper()
	deadline := time.Now().Add(failoverWait)
	var why string
	for time.Now().Before(deadline) {
		var next *Server
		if next, why = g.agreed(old); next != nil {
			g.mu.Lock()
			if old == nil && next != g.primary {
				g.unplanned++
			}
			g.primary = next
			for _, s := range g.servers {
				s.mu.Lock()
				if s == next {
					s.primary = nil
				} else {
					// Sentinel reconfigures the live replicas to follow
					// next; a dead one rejoins as its replica.
					s.primary = next
				}
				s.mu.Unlock()
			}
			g.mu.Unlock()
			return next
		}
		time.Sleep(pollEvery)
	}
	g.t.Fatalf("redisproc: the sentinels agreed on no primary within %v: %s\n%s", failoverWait, why, g.sentinels[0].logTail(30))
	return nil
}

// Rejoin restarts a primary killed before a failover as a replica of the
// current primary and waits until it is in sync.
func (g *Sentinels) Rejoin(s *Server) {
	g.t.Helper()
	g.AwaitPrimary()
	s.Restart()
	ctx, cancel := context.WithTimeout(context.Background(), syncTimeout)
	defer cancel()
	s.WaitSync(ctx)
}

// Replicas returns the servers that are up and not the current primary.
func (g *Sentinels) Replicas() []*Server {
	primary := g.Primary()
	var rs []*Server
	for _, s := range g.servers {
		s.mu.Lock()
		up := !s.proc.exited()
		s.mu.Unlock()
		if s != primary && up {
			rs = append(rs, s)
		}
	}
	return rs
}

// WaitReplicas makes every live replica follow the current primary and
// waits until each is in sync with it. Sentinel points the replicas at a
// promoted primary itself, but a server it demoted alive, or one restarted
// behind a second failover, it reconfigures only after up to 10 seconds;
// WaitReplicas sends REPLICAOF to those at once.
func (g *Sentinels) WaitReplicas(ctx context.Context) {
	g.t.Helper()
	primary := g.AwaitPrimary()
	for _, s := range g.Replicas() {
		info, err := s.info(ctx)
		if err != nil || info["role"] != "slave" || info["master_port"] != strconv.Itoa(primary.port) {
			s.ReplicaOf(primary)
		}
		s.WaitSync(ctx)
	}
}

// agreed returns the primary once every sentinel names the same server, not
// old, and that server is a master; otherwise it says why not.
func (g *Sentinels) agreed(old *Server) (*Server, string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var named string
	for _, s := range g.sentinels {
		a, err := s.admin().GetMasterAddrByName(ctx, SentinelMasterName).Result()
		if err != nil {
			return nil, fmt.Sprintf("sentinel %s: %v", s.addr(), err)
		}
		addr := net.JoinHostPort(a[0], a[1])
		if old != nil && addr == old.Addr() || named != "" && addr != named {
			return nil, fmt.Sprintf("sentinel %s names %s", s.addr(), addr)
		}
		named = addr
	}
	for _, s := range g.servers {
		if s.Addr() != named {
			continue
		}
		info, err := s.info(ctx)
		if err != nil || info["role"] != "master" {
			return nil, fmt.Sprintf("%s is named but is not yet a master (role %q, %v)", named, info["role"], err)
		}
		return s, ""
	}
	return nil, "the sentinels name " + named + ", which is none of the group's servers"
}

// waitKnown waits until every sentinel sees the primary up, replicas
// replicas and others other sentinels.
func (g *Sentinels) waitKnown(replicas, others int) {
	g.t.Helper()
	want := map[string]string{"flags": "master", "num-slaves": strconv.Itoa(replicas), "num-other-sentinels": strconv.Itoa(others)}
	deadline := time.Now().Add(readyTimeout)
	for _, s := range g.sentinels {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			m, err := s.admin().Master(ctx, SentinelMasterName).Result()
			cancel()
			var why string
			for k, v := range want {
				if err == nil && m[k] != v {
					why += fmt.Sprintf(" %s=%s (want %s)", k, m[k], v)
				}
			}
			if err == nil && why == "" {
				break
			}
			if time.Now().After(deadline) {
				g.t.Fatalf("redisproc: sentinel %s not ready within %v: %v%s\n%s", s.addr(), readyTimeout, err, why, s.logTail(20))
			}
			time.Sleep(pollEvery)
		}
	}
}
