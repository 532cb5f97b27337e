//go:build unix

package redisproc

import (
	"fmt"
	"time"
)

// MigrateStats says what [Cluster.MigrateSlot] did.
type MigrateStats struct {
	Keys    int           // keys moved
	Batches int           // MIGRATE commands sent
	Took    time.Duration // from SETSLOT IMPORTING to every node agreeing
}

// MigrateSlot moves slot to the primary dst while clients go on, as
// redis-cli --cluster reshard does: CLUSTER SETSLOT IMPORTING on dst and
// MIGRATING on the slot's primary, then MIGRATE of at most batch keys at a
// time (waiting pause after each, to widen the window in which a slot's
// keys are split between the two), then CLUSTER SETSLOT NODE on dst, on
// the source and on every other primary. It waits until every node agrees
// that dst serves slot, and fails the test on any error.
//
// While the slot is split, a command on keys that are all on one side is
// served there (the source answers ASK for keys it no longer has); one
// whose keys are split, or missing on the side asked, gets TRYAGAIN.
func (c *Cluster) MigrateSlot(slot int, dst *Server, batch int, pause time.Duration) MigrateStats {
	c.t.Helper()
	src := c.MasterOf(slot)
	if src == dst {
		c.t.Fatalf("redisproc: slot %d is already on %s", slot, dst.Addr())
	}
	start := time.Now()
	dst.do("CLUSTER", "SETSLOT", slot, "IMPORTING", c.ID(src))
	src.do("CLUSTER", "SETSLOT", slot, "MIGRATING", c.ID(dst))
	var st MigrateStats
	for {
		keys, _ := src.do("CLUSTER", "GETKEYSINSLOT", slot, batch).([]any)
		if len(keys) == 0 {
			break
		}
		args := append([]any{"MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS"}, keys...)
		src.do(args...)
		st.Keys += len(keys)
		st.Batches++
		time.Sleep(pause)
	}
	dst.do("CLUSTER", "SETSLOT", slot, "NODE", c.ID(dst))
	src.do("CLUSTER", "SETSLOT", slot, "NODE", c.ID(dst))
	for _, m := range c.Masters() {
		if m != src && m != dst {
			m.do("CLUSTER", "SETSLOT", slot, "NODE", c.ID(dst))
		}
	}
	c.wait(fmt.Sprintf("every node to see slot %d on %s", slot, dst.Addr()), func() string {
		for _, s := range c.live() {
			v, err := s.clusterView()
			if err != nil {
				return err.Error()
			}
			if owner := v.owner(slot); owner != dst.Addr() {
				return fmt.Sprintf("%s sees slot %d on %q", s.Addr(), slot, owner)
			}
		}
		return ""
	})
	st.Took = time.Since(start)
	return st
}

// Failover promotes replica with CLUSTER FAILOVER, the graceful kind: its
// primary stops taking writes, the replica catches up, takes over the
// slots and the old primary becomes its replica. It waits until the
// cluster has settled (see [Cluster.Settle]) and returns how long that took.
func (c *Cluster) Failover(replica *Server) time.Duration {
	c.t.Helper()
	start := time.Now()
	replica.do("CLUSTER", "FAILOVER")
	c.wait("the replica's promotion", func() string { return c.notMaster(replica) })
	c.Settle()
	return time.Since(start)
}

// KillMaster kills primary m with SIGKILL and waits until one of its
// replicas has been elected in its place and the cluster has settled. It
// returns the new primary and how long that took: about the node timeout,
// to count m failed, plus the election. Until then the cluster refuses
// commands with CLUSTERDOWN, on every slot unless cluster-require-full-
// coverage is off. It fails the test if m has no replica.
func (c *Cluster) KillMaster(m *Server) (*Server, time.Duration) {
	c.t.Helper()
	rs := c.ReplicasOf(m)
	if len(rs) == 0 {
		c.t.Fatalf("redisproc: %s has no replica to take over", m.Addr())
	}
	start := time.Now()
	m.Kill()
	var promoted *Server
	c.wait("a replica's election", func() string {
		for _, r := range rs {
			if c.notMaster(r) == "" {
				promoted = r
				return ""
			}
		}
		return "no replica of " + m.Addr() + " is primary yet"
	})
	c.Settle()
	return promoted, time.Since(start)
}

// notMaster says why s does not serve slots as a primary yet, or "".
func (c *Cluster) notMaster(s *Server) string {
	v, err := s.clusterView()
	if err != nil {
		return err.Error()
	}
	if me := v.myself(); me == nil || !me.has("master") || len(me.slots) == 0 {
		return s.Addr() + " is not a primary with slots"
	}
	return ""
}
