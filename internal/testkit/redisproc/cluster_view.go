//go:build unix

package redisproc

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Masters returns the live primaries that serve slots, in start order.
func (c *Cluster) Masters() []*Server {
	c.t.Helper()
	owners := c.owners()
	var ms []*Server
	for _, s := range c.nodes {
		for _, o := range owners {
			if o == s {
				ms = append(ms, s)
				break
			}
		}
	}
	return ms
}

// MasterOf returns the primary serving slot.
func (c *Cluster) MasterOf(slot int) *Server {
	c.t.Helper()
	return c.owners()[slot]
}

// ReplicasOf returns the live replicas of primary m.
func (c *Cluster) ReplicasOf(m *Server) []*Server {
	c.t.Helper()
	id := c.ID(m)
	var rs []*Server
	for _, s := range c.live() {
		if v, err := s.clusterView(); err == nil {
			if me := v.myself(); me != nil && me.master == id {
				rs = append(rs, s)
			}
		}
	}
	return rs
}

// owners maps each slot to its primary, as the first live node sees it.
func (c *Cluster) owners() *[16384]*Server {
	c.t.Helper()
	live := c.live()
	if len(live) == 0 {
		c.t.Fatalf("redisproc: no live cluster node")
	}
	v, err := live[0].clusterView()
	if err != nil {
		c.t.Fatalf("redisproc: %s: CLUSTER NODES: %v", live[0].Addr(), err)
	}
	var owners [16384]*Server
	for _, n := range v {
		s := c.byAddr(n.addr)
		for _, r := range n.slots {
			for slot := r[0]; slot <= r[1]; slot++ {
				owners[slot] = s
			}
		}
	}
	return &owners
}

func (c *Cluster) byAddr(addr string) *Server {
	for _, s := range c.nodes {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// live returns the nodes whose process runs.
func (c *Cluster) live() []*Server {
	var l []*Server
	for _, s := range c.nodes {
		s.mu.Lock()
		p := s.proc
		s.mu.Unlock()
		if p != nil && !p.exited() {
			l = append(l, s)
		}
	}
	return l
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr string // addr without the bus port
	flags    []string
	master   string   // the primary's ID for a replica, "-" otherwise
	slots    [][2]int // ranges served, migration markers left out
}

func (n clusterNode) has(flag string) bool { return slices.Contains(n.flags, flag) }

// clusterNodes is one node's view of the cluster.
type clusterNodes []clusterNode

func (v clusterNodes) myself() *clusterNode {
	for i := range v {
		if v[i].has("myself") {
			return &v[i]
		}
	}
	return nil
}

// owner returns the address of the node serving slot in this view.
func (v clusterNodes) owner(slot int) string {
	for _, n := range v {
		for _, r := range n.slots {
			if r[0] <= slot && slot <= r[1] {
				return n.addr
			}
		}
	}
	return ""
}

// slotMap formats who serves what, the same way for equal views.
func (v clusterNodes) slotMap() string {
	var parts []string
	for _, n := range v {
		for _, r := range n.slots {
			parts = append(parts, fmt.Sprintf("%05d-%05d@%s", r[0], r[1], n.addr))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// clusterView reads and parses s's CLUSTER NODES.
func (s *Server) clusterView() (clusterNodes, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out, err := s.adminClient().ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("%s: CLUSTER NODES: %w", s.Addr(), err)
	}
	var v clusterNodes
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("%s: CLUSTER NODES line %q", s.Addr(), line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		if strings.HasPrefix(addr, ":") {
			addr = "127.0.0.1" + addr // a node that never met another does not know its IP
		}
		n := clusterNode{id: f[0], addr: addr, flags: strings.Split(f[2], ","), master: f[3]}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being imported or migrated
			}
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("%s: CLUSTER NODES slots %q", s.Addr(), r)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		v = append(v, n)
	}
	return v, nil
}
