//go:build unix

package redisproc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds every wait for a cluster to settle: start, slot
// moves, failovers.
const clusterTimeout = 15 * time.Second

// ClusterConfig sizes a cluster started by [StartCluster].
type ClusterConfig struct {
	Masters  int // primaries, each with an equal share of the slots; default 3
	Replicas int // replicas per primary; default 0
	// NodeTimeout is cluster-node-timeout: how long a node may be silent
	// before the others count it failed and its replica takes over.
	// Default 2s.
	NodeTimeout time.Duration
	Args        []string // extra redis-server arguments for every node
}

// A Cluster is a Redis Cluster of redis-server processes the test
// controls, each on loopback with its own data directory, killed by PID
// when the test ends (see [Start]). A Cluster must not be copied.
type Cluster struct {
	t     testing.TB
	cfg   ClusterConfig
	nodes []*Server

	mu      sync.Mutex
	ids     map[*Server]string
	clients []*redis.ClusterClient
}

// StartCluster starts cfg.Masters primaries and cfg.Replicas replicas of
// each, gives primary i the i-th share of the 16384 slots and config epoch
// i+1, joins them with CLUSTER MEET and CLUSTER REPLICATE (no redis-cli
// needed), and waits until every node reports cluster_state:ok, all agree
// who serves every slot, and every replica is in sync. The cluster bus of
// each node gets a free port of its own.
//
// Like [Start], it skips the test without redis-server (fails it under
// CI=true), and fails it if the cluster does not settle within 15 seconds.
func StartCluster(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	if cfg.Masters == 0 {
		cfg.Masters = 3
	}
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = 2 * time.Second
	}
	c := &Cluster{t: t, cfg: cfg, ids: map[*Server]string{}}
	t.Cleanup(c.closeClients) // before the nodes' own cleanups: LIFO
	for range cfg.Masters * (1 + cfg.Replicas) {
		c.nodes = append(c.nodes, startClusterNode(t, cfg))
	}
	first := c.nodes[0]
	for i, m := range c.nodes[:cfg.Masters] {
		lo, hi := i*16384/cfg.Masters, (i+1)*16384/cfg.Masters-1
		m.do("CLUSTER", "SET-CONFIG-EPOCH", i+1)
		m.do("CLUSTER", "ADDSLOTSRANGE", lo, hi)
	}
	for _, s := range c.nodes[1:] {
		first.do("CLUSTER", "MEET", "127.0.0.1", s.port, clusterBus(s))
	}
	c.wait("every node to know every other", func() string {
		for _, s := range c.nodes {
			v, err := s.clusterView()
			if err != nil {
				return err.Error()
			}
			if len(v) != len(c.nodes) {
				return fmt.Sprintf("%s knows %d nodes of %d", s.Addr(), len(v), len(c.nodes))
			}
			for _, n := range v {
				if n.has("handshake") || n.has("noaddr") {
					return fmt.Sprintf("%s sees %s in %s", s.Addr(), n.addr, strings.Join(n.flags, ","))
				}
			}
		}
		return ""
	})
	for i, r := range c.nodes[cfg.Masters:] {
		r.do("CLUSTER", "REPLICATE", c.ID(c.nodes[i%cfg.Masters]))
	}
	c.Settle()
	return c
}

// startClusterNode starts one cluster-enabled node, like Start, drawing a
// new port and bus port whenever another process took one first.
func startClusterNode(t testing.TB, cfg ClusterConfig) *Server {
	t.Helper()
	s := &Server{t: t, bin: binary(t), cfg: config{fsync: "everysec"}}
	s.dir = t.TempDir()
	t.Cleanup(s.cleanup)
	var err error
	for range portAttempts {
		var bus int
		if s.port, err = freePort(); err == nil {
			bus, err = freePort()
		}
		if err != nil {
			break
		}
		if bus == s.port {
			continue
		}
		s.cfg.extra = append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", strconv.FormatInt(cfg.NodeTimeout.Milliseconds(), 10)}, cfg.Args...)
		if err = s.launch(); !errors.Is(err, errPortTaken) {
			break
		}
	}
	if err != nil {
		t.Fatalf("redisproc: start cluster node: %v\n%s", err, s.LogTail(20))
	}
	return s
}

// clusterBus returns the cluster bus port s was started with.
func clusterBus(s *Server) int {
	for i, a := range s.cfg.extra {
		if a == "--cluster-port" {
			p, _ := strconv.Atoi(s.cfg.extra[i+1])
			return p
		}
	}
	return 0
}

// Nodes returns every node, primaries first, in start order. Roles change
// with failovers; see [Cluster.Masters].
func (c *Cluster) Nodes() []*Server { return append([]*Server(nil), c.nodes...) }

// ID returns s's cluster node ID.
func (c *Cluster) ID(s *Server) string {
	c.t.Helper()
	c.mu.Lock()
	id, ok := c.ids[s]
	c.mu.Unlock()
	if !ok {
		id = s.do("CLUSTER", "MYID").(string)
		c.mu.Lock()
		c.ids[s] = id
		c.mu.Unlock()
	}
	return id
}

// Client returns a new cluster client seeded with every node's address,
// closed when the test ends. It has go-redis's defaults but for
// DisableIdentity (Redis 7.0 has no CLIENT SETINFO); configure may change
// any option.
func (c *Cluster) Client(configure ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	o := &redis.ClusterOptions{DisableIdentity: true}
	for _, s := range c.nodes {
		o.Addrs = append(o.Addrs, s.Addr())
	}
	for _, f := range configure {
		f(o)
	}
	cc := redis.NewClusterClient(o)
	c.mu.Lock()
	c.clients = append(c.clients, cc)
	c.mu.Unlock()
	return cc
}

func (c *Cluster) closeClients() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cc := range c.clients {
		_ = cc.Close()
	}
}

// wait polls cond until it returns "" or clusterTimeout passes, when it
// fails the test with cond's last reason.
func (c *Cluster) wait(what string, cond func() string) {
	c.t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("redisproc: cluster: waited %v for %s: %s", clusterTimeout, what, why)
		}
		time.Sleep(pollEvery)
	}
}

// Settle waits until every live node reports cluster_state:ok, all agree
// on the live primary serving every slot, and every live replica's link to
// its primary is up. It fails the test after 15 seconds. It then records
// each replica's primary, so that [Server.WaitSync] and [Server.Isolate]
// work on cluster replicas too.
func (c *Cluster) Settle() {
	c.t.Helper()
	c.wait("the cluster to settle", c.unsettled)
	for _, s := range c.live() {
		v, err := s.clusterView()
		if err != nil {
			c.t.Fatalf("redisproc: %v", err)
		}
		var primary *Server
		if me := v.myself(); me != nil && !me.has("master") {
			for _, n := range v {
				if n.id == me.master {
					primary = c.byAddr(n.addr)
				}
			}
		}
		s.mu.Lock()
		s.primary = primary
		s.mu.Unlock()
	}
}

func (c *Cluster) unsettled() string {
	var want string
	for _, s := range c.live() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		info, err := s.adminClient().ClusterInfo(ctx).Result()
		repl, rerr := s.info(ctx)
		cancel()
		switch {
		case err != nil:
			return fmt.Sprintf("%s: %v", s.Addr(), err)
		case !strings.Contains(info, "cluster_state:ok"):
			return s.Addr() + " is not cluster_state:ok"
		case rerr != nil:
			return fmt.Sprintf("%s: %v", s.Addr(), rerr)
		case repl["role"] == "slave" && repl["master_link_status"] != "up":
			return s.Addr() + ": replica link " + repl["master_link_status"]
		}
		v, err := s.clusterView()
		if err != nil {
			return err.Error()
		}
		got := v.slotMap()
		for _, n := range v {
			if len(n.slots) > 0 && (n.has("fail") || n.has("fail?") || !n.has("master")) {
				return fmt.Sprintf("%s sees %s (%s) serve slots", s.Addr(), n.addr, strings.Join(n.flags, ","))
			}
		}
		if want == "" {
			want = got
		} else if got != want {
			return fmt.Sprintf("%s disagrees on the slots: %s vs %s", s.Addr(), got, want)
		}
	}
	return ""
}
