package reentrant

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/hashslot"
)

// On a Cluster, a script may SPUBLISH only to a shard channel served by
// its own node, and only a channel in the lock's own slot stays with the
// lock when the slot moves. So a Cluster client listens on one channel per
// slot, P:c:{<tag>}:<client ID> where {<tag>} is hashslot.Tag(slot), in
// each slot where it has waiters: one go-redis PubSub, thus one connection
// to the slot's master, per such slot. (Redis refuses an SSUBSCRIBE whose
// channels span slots, and go-redis re-subscribes all of a PubSub's
// channels in one command, so a PubSub cannot serve two slots.)
//
// A subscription outlives its last waiter by shardLinger, so that a client
// contending for one lock again and again subscribes once. When the slot
// moves, or its master fails over, the server ends the subscription (it
// sends "sunsubscribe") or the connection fails; the client subscribes
// again at the slot's new master and wakes the slot's waiters to poll,
// which claims a lock whose message was lost meanwhile.
const (
	shardLinger = 5 * time.Second
	// shardTick is how long a subscription waits for a message before it
	// pings its server; a second tick without a reply subscribes anew.
	shardTick = time.Second
	// shardBackoff bounds the wait between two attempts to subscribe.
	shardBackoffMin, shardBackoffMax = 10 * time.Millisecond, time.Second
)

// shards are the shard subscriptions of one Cluster client. linger and
// subs are guarded by n.mu.
type shards struct {
	n          *notifier
	cc         *redis.ClusterClient
	prefix, id string
	mode       atomic.Int32 // shardUnknown until asked, then shardOn or shardOff
	linger     time.Duration
	subs       map[int]*shard
}

const (
	shardUnknown = iota
	shardOn
	shardOff
)

// shard is the subscription to one slot's channel.
type shard struct {
	slot    int
	channel string
	waiters int           // registered waiters on this slot
	running bool          // its goroutine runs
	idle    time.Time     // when waiters last dropped to 0
	ps      *redis.PubSub // the current attempt's, nil between attempts
	stop    chan struct{} // closed to end the subscription
}

func newShards(n *notifier, cc *redis.ClusterClient, prefix, id string) *shards {
	return &shards{n: n, cc: cc, prefix: prefix, id: id, linger: shardLinger, subs: make(map[int]*shard)}
}

// on reports whether the cluster has sharded pub/sub (SPUBLISH, Redis 7),
// asking once with COMMAND INFO. A server that refuses to say is taken to
// have none; one that cannot be reached is asked again next time, and
// meanwhile the classic channel is used, which works everywhere.
func (sh *shards) on(ctx context.Context) bool {
	switch sh.mode.Load() {
	case shardOn:
		return true
	case shardOff:
		return false
	}
	v, err := sh.cc.Do(ctx, "COMMAND", "INFO", "SPUBLISH").Slice()
	switch {
	case err == nil && len(v) == 1 && v[0] != nil:
		sh.mode.Store(shardOn)
		return true
	case err == nil || isReply(err):
		sh.mode.Store(shardOff)
	}
	return false
}

// ref counts a waiter on slot and returns the slot's channel.
func (sh *shards) ref(slot int) string {
	s := sh.subs[slot]
	if s == nil {
		s = &shard{slot: slot, channel: sh.prefix + ":c:" + hashslot.Tag(slot) + ":" + sh.id}
		sh.subs[slot] = s
	}
	s.waiters++
	return s.channel
}

// unref uncounts a waiter on slot. A subscription never started goes at
// once; a running one ends shardLinger after its last waiter left.
func (sh *shards) unref(slot int) {
	s := sh.subs[slot]
	if s == nil { // closed
		return
	}
	if s.waiters--; s.waiters > 0 {
		return
	}
	s.idle = time.Now()
	if !s.running {
		delete(sh.subs, slot)
	}
}

// listen starts slot's subscription unless it runs.
func (sh *shards) listen(slot int) {
	s := sh.subs[slot]
	if s == nil || s.running {
		return
	}
	s.running, s.stop = true, make(chan struct{})
	if !sh.n.spawn(func() { sh.run(s) }) {
		s.running = false
	}
}

// run subscribes to s's channel, again and again, until s is stopped or
// idle past shardLinger.
func (sh *shards) run(s *shard) {
	ctx := context.Background()
	b := backoff{next: shardBackoffMin, max: shardBackoffMax}
	for {
		// SSubscribe dials the slot's master as go-redis knows it, within
		// go-redis's timeouts; a failure shows in Receive.
		ps := sh.cc.SSubscribe(ctx, s.channel)
		if !sh.attach(s, ps) {
			_ = ps.Close()
			return
		}
		confirmed, idle := sh.receive(s, ps)
		_ = ps.Close()
		sh.n.poke(s.slot)
		if idle || !sh.attach(s, nil) || sh.expire(s) {
			return
		}
		if confirmed {
			b.next = shardBackoffMin
		}
		// A move or a failover: have go-redis learn the slot's new master.
		sh.cc.ReloadState(ctx)
		if !sleep(s.stop, b.delay()) {
			return
		}
	}
}

// attach records ps as s's current subscription, and reports false when s
// has been stopped.
func (sh *shards) attach(s *shard, ps *redis.PubSub) bool {
	sh.n.mu.Lock()
	defer sh.n.mu.Unlock()
	select {
	case <-s.stop:
		return false
	default:
	}
	s.ps = ps
	return true
}

// receive dispatches ps's messages until the subscription ends: the server
// ended it, the connection failed or stayed silent for two ticks, or s was
// stopped. It reports whether the server confirmed the subscription, and
// whether s ended because it was idle past shardLinger.
func (sh *shards) receive(s *shard, ps *redis.PubSub) (confirmed, idle bool) {
	ctx := context.Background()
	pinged := false
	for {
		m, err := ps.ReceiveTimeout(ctx, shardTick)
		var ne net.Error
		switch {
		case err != nil && errors.As(err, &ne) && ne.Timeout():
			if sh.expire(s) {
				return confirmed, true
			}
			if pinged || ps.Ping(ctx) != nil {
				return confirmed, false
			}
			pinged = true
			continue
		case err != nil:
			return confirmed, false
		}
		pinged = false
		switch m := m.(type) {
		case *redis.Message:
			sh.n.deliver(m.Payload)
		case *redis.Subscription:
			switch m.Kind {
			case "ssubscribe":
				confirmed = true
				sh.n.poke(s.slot)
			case "sunsubscribe":
				return confirmed, false
			}
		}
	}
}

// expire ends s if it has had no waiter for shardLinger, and reports
// whether it did.
func (sh *shards) expire(s *shard) bool {
	sh.n.mu.Lock()
	defer sh.n.mu.Unlock()
	if s.waiters > 0 || time.Since(s.idle) < sh.linger || sh.subs[s.slot] != s {
		return false
	}
	delete(sh.subs, s.slot)
	close(s.stop)
	return true
}

// close ends every subscription; Client.Close waits for their goroutines.
func (sh *shards) close() {
	sh.n.mu.Lock()
	var open []*redis.PubSub
	for slot, s := range sh.subs {
		if s.running {
			close(s.stop)
			if s.ps != nil {
				open = append(open, s.ps)
			}
		}
		delete(sh.subs, slot)
	}
	sh.n.mu.Unlock()
	for _, ps := range open {
		_ = ps.Close()
	}
}
