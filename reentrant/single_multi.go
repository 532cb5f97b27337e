package reentrant

// The single backend's LockMulti: one multi.lua call per group of names
// that one script may touch (every name on a standalone server or
// Sentinel, one hash slot's names on a Cluster), the groups taken in one
// global order, and what a waiting call leaves in the queues.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/hashslot"
	"github.com/redfence/redfence/internal/scripts"
)

// singleMulti is a waiting LockMulti's state on the single backend: the
// notifier's waiters it registered (one per channel: the classic one, or
// one shard channel per slot), and the queue entries it may have left.
type singleMulti struct {
	mu      sync.Mutex
	waiters map[int]*waiter   // by slot; -1 for the classic channel
	queued  map[string]string // queue key -> the entry left there
}

// multiGroups splits m's calls into the groups one script takes, in the
// order they are taken: one group on a standalone server or Sentinel; on
// a Cluster, one per hash slot, by rising slot, so that every caller takes
// slots in the same order; nil where names cannot share a script (a Ring:
// its shards are not slots).
func (s *single) multiGroups(m *multiCall) [][]int {
	all := make([]int, len(m.rs))
	for i := range all {
		all[i] = i
	}
	switch s.rdb.(type) {
	case *redis.Client:
		return [][]int{all}
	case *redis.ClusterClient:
	default:
		return nil
	}
	slot := func(i int) int { return hashslot.Of(singleOf(m.rs[i]).keys.Lock) }
	slices.SortStableFunc(all, func(a, b int) int { return cmp.Compare(slot(a), slot(b)) })
	var groups [][]int
	for i, j := 0, 0; i < len(all); i = j {
		for j = i; j < len(all) && slot(all[j]) == slot(all[i]); j++ {
		}
		groups = append(groups, all[i:j])
	}
	return groups
}

func (s *single) acquireMulti(ctx context.Context, m *multiCall) (multiResult, error) {
	groups := s.multiGroups(m)
	if groups == nil {
		return takeInOrder(ctx, s, m)
	}
	res := multiResult{grants: make([]acquired, len(m.rs))}
	var taken []int
	giveBack := func() error {
		if err := s.undoAll(m, taken); err != nil {
			return fmt.Errorf("giving back %d names it took: %w", len(taken), err)
		}
		return nil
	}
	for _, g := range groups {
		rep, sent, err := s.multiGroup(ctx, m, g)
		switch {
		case err != nil:
			return res, givenBack(ctx, err, giveBack())
		case rep.TooDeep >= 0:
			return res, givenBack(ctx, errMultiTooDeep(m.names[g[rep.TooDeep]], rep.Depths[0]), giveBack())
		case !rep.OK:
			if gerr := giveBack(); gerr != nil {
				return res, givenBack(ctx, nil, gerr)
			}
			for _, j := range rep.Blocked {
				res.blocked = append(res.blocked, g[j])
			}
			res.holderTTL = rep.HolderTTL
			s.listenMulti(m)
			return res, nil
		}
		for j, i := range g {
			res.grants[i] = acquired{ok: true, token: rep.Tokens[j], depth: rep.Depths[j], sent: sent}
			taken = append(taken, i)
		}
	}
	return res, nil
}

// multiGroup runs multi.lua on the names g of m, bounded by ctx as a Lock
// attempt is (see single.acquire): an attempt whose outcome is unknown is
// undone, and so is one whose replicas did not acknowledge it
// (WithReplicaAck).
func (s *single) multiGroup(ctx context.Context, m *multiCall, g []int) (scripts.MultiReply, time.Time, error) {
	c := s.c
	ks := make([]scripts.Keys, len(g))
	req := scripts.MultiRequest{Owner: string(m.owner), TTL: m.cfg.ttl, Meta: m.cfg.meta, MaxDepth: m.cfg.maxDepth,
		Tokens: s.tokens, Levels: make([]string, len(g)), Again: m.again}
	for j, i := range g {
		ks[j], req.Levels[j] = singleOf(m.rs[i]).keys, m.rs[i].level
	}
	if m.waiting {
		member, err := s.wakeMember(ctx, m, ks[0].Lock)
		if err != nil {
			return scripts.MultiReply{}, time.Time{}, err
		}
		req.Wake, req.Queue = member, 2*m.cfg.ttl+c.cfg.handoff
		// Until the reply says where the entry went, it may be in any
		// queue of the group: leaveMulti takes it out of each.
		s.noteQueued(m, ks, nil, member)
	}
	undo := func() {
		for _, i := range g {
			m.rs[i].undoInBackground()
		}
	}
	mark := c.watch.mark()
	left := func(r scripts.MultiReply, err error) bool {
		return r.OK || (err != nil && c.ran(err, s.retries, mark))
	}
	// Until the attempt returns, Redis may keep what it takes: should the
	// caller leave first, Close waits for the undo.
	us := make([]*unsettled, len(g))
	for j, i := range g {
		us[j] = c.unsettle(m.names[i])
	}
	settle := func() {
		for _, u := range us {
			c.settle(u)
		}
	}
	type reply struct {
		rep   scripts.MultiReply
		acked int
		sent  time.Time
	}
	out := bounded(c, ctx, cleanupBudget/2, func(ctx context.Context) (reply, error) {
		return retryBusy(s, ctx, func(ctx context.Context) (reply, error) {
			sent := time.Now()
			rep, acked, err := s.runMulti(ctx, ks, &req)
			return reply{rep, acked, sent}, err
		})
	}, func(r reply, err error) {
		if left(r.rep, err) {
			undo()
		}
		settle()
	})
	if out.known {
		defer settle() // once the undo below is under way
	}
	r, err := out.v, out.err
	switch {
	case out.ended && !out.known:
		return r.rep, r.sent, fmt.Errorf("%w: %w before Redis answered; what the attempt may have taken is undone "+
			"in the background", ErrOutcomeUnknown, err)
	case out.ended:
		cerr := ctxErr(ctx)
		if left(r.rep, err) {
			if uerr := s.undoAll(m, g); uerr != nil {
				return r.rep, r.sent, join(ErrOutcomeUnknown, cerr, besides(err, cerr), uerr)
			}
		}
		return r.rep, r.sent, join(ErrNotAcquired, cerr, besides(err, cerr))
	case err == nil && r.rep.OK && r.acked < c.cfg.ackReplicas:
		return r.rep, r.sent, notReplicated(r.acked, c.cfg.ackReplicas, c.cfg.ackTimeout, s.undoAll(m, g))
	case err == nil:
		if m.waiting {
			// The entry is in the queues of the names that refused, and
			// in no other of the group's (a take removes it).
			s.forgetQueued(m, ks)
			if !r.rep.OK && r.rep.TooDeep < 0 {
				s.noteQueued(m, ks, r.rep.Blocked, req.Wake)
			}
		}
		return r.rep, r.sent, nil
	case left(r.rep, err):
		if uerr := s.undoAll(m, g); uerr != nil {
			return r.rep, r.sent, fmt.Errorf("%w (%w); the locks may stay held by this owner for up to %v: %w",
				ErrOutcomeUnknown, err, m.cfg.ttl, uerr)
		}
	}
	if cerr := ctxErr(ctx); cerr != nil {
		return r.rep, r.sent, join(ErrNotAcquired, cerr, err)
	}
	return r.rep, r.sent, err
}

// runMulti runs multi.lua, followed by WAIT on the same connection when
// replica acknowledgement is on and every name was taken; acked is the
// number of replicas that acknowledged.
func (s *single) runMulti(ctx context.Context, ks []scripts.Keys, req *scripts.MultiRequest) (scripts.MultiReply, int, error) {
	c := s.c
	if c.cfg.ackReplicas == 0 {
		rep, err := scripts.Multi(ctx, s.rdb, ks, req)
		return rep, 0, err
	}
	var node *redis.Client
	switch rdb := s.rdb.(type) {
	case *redis.Client:
		node = rdb
	case *redis.ClusterClient:
		var err error
		if node, err = rdb.MasterForKey(ctx, ks[0].Lock); err != nil {
			return scripts.MultiReply{}, 0, err
		}
	}
	conn := node.Conn()
	defer conn.Close()
	rep, err := scripts.Multi(ctx, scripts.Via(conn, node), ks, req)
	if err != nil || !rep.OK {
		return rep, 0, err
	}
	n, err := conn.Do(ctx, "WAIT", c.cfg.ackReplicas, c.cfg.ackTimeout.Milliseconds()).Int()
	if err != nil {
		return scripts.MultiReply{}, 0, &grantedError{err}
	}
	return rep, n, nil
}

// state returns m's state on this backend, made on first use.
func (s *single) multiState(m *multiCall) *singleMulti {
	if m.be == nil {
		m.be = &singleMulti{waiters: make(map[int]*waiter), queued: make(map[string]string)}
	}
	return m.be.(*singleMulti)
}

// wakeMember returns m's queue entry for the names of the group whose
// first lock key is lockKey, registering the waiter its wake message
// reaches, once per channel (listenMulti subscribes it).
func (s *single) wakeMember(ctx context.Context, m *multiCall, lockKey string) (string, error) {
	st := s.multiState(m)
	slot := -1
	if s.note.shards != nil && s.note.shards.on(ctx) {
		slot = hashslot.Of(lockKey)
	}
	id := m.id
	if slot >= 0 {
		id += "/" + strconv.Itoa(slot)
	}
	st.mu.Lock()
	w := st.waiters[slot]
	st.mu.Unlock()
	if w == nil {
		w = &waiter{wake: m.wake}
		if _, err := s.note.register(ctx, lockKey, "*"+id, w); err != nil {
			return "", err
		}
		st.mu.Lock()
		st.waiters[slot] = w
		st.mu.Unlock()
	}
	return scripts.WakeMember(id, scripts.Waiter{Channel: w.channel, Sharded: w.slot >= 0}), nil
}

// listenMulti makes sure the channels of m's waiters are subscribed, once
// an attempt was refused: as a Lock's (single.lock), a call that never
// waits subscribes nothing, and a wake published before the subscription
// is confirmed is made up for by the poke each confirmation gives.
func (s *single) listenMulti(m *multiCall) {
	st, ok := m.be.(*singleMulti)
	if !ok {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, w := range st.waiters {
		s.note.listen(w)
	}
}

// noteQueued records the queues of ks that an attempt's entry may have
// joined: those of blocked (indices into ks), or with blocked nil all.
func (s *single) noteQueued(m *multiCall, ks []scripts.Keys, blocked []int, member string) {
	st := s.multiState(m)
	st.mu.Lock()
	defer st.mu.Unlock()
	if blocked == nil {
		for _, k := range ks {
			st.queued[k.Queue] = member
		}
	}
	for _, j := range blocked {
		st.queued[ks[j].Queue] = member
	}
}

// forgetQueued drops the queues of ks from m's record.
func (s *single) forgetQueued(m *multiCall, ks []scripts.Keys) {
	st := s.multiState(m)
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, k := range ks {
		delete(st.queued, k.Queue)
	}
}

// undoAll undoes the calls of m at indices is at once (abandon.lua for each,
// in parallel), within one cleanupBudget/2; what is still unconfirmed then
// goes on in the background. It returns the undos' errors, joined.
func (s *single) undoAll(m *multiCall, is []int) error {
	errs := make([]error, len(is))
	var wg sync.WaitGroup
	for j, i := range is {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[j] = m.rs[i].undo(); errs[j] != nil {
				s.c.debug("reentrant: giving back a name of a refused LockMulti", "name", m.rs[i].name, "err", errs[j])
			}
		}()
	}
	wg.Wait()
	return join(errs...)
}

// leaveMulti takes m's entries out of the queues they may be in, waiting at
// most cleanupBudget/2 (then going on in the background), and unregisters
// its waiters. An entry left behind
// (Redis did not answer) is harmless: the next release of its name wakes
// nobody with it, and the queue's expiry removes it.
func (s *single) leaveMulti(m *multiCall) {
	st, ok := m.be.(*singleMulti)
	if !ok {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.queued) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupBudget/2)
		defer cancel()
		queued := st.queued
		_ = bounded(s.c, ctx, 0, func(ctx context.Context) (struct{}, error) {
			// As in undo: a call bounded leaves running must outlive the
			// cancel below; only the client's own timeouts bound it then.
			if !s.c.inline(ctx) {
				ctx = context.WithoutCancel(ctx)
			}
			_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for queue, member := range queued {
					p.ZRem(ctx, queue, member)
				}
				return nil
			})
			if err != nil {
				s.c.debug("reentrant: leaving the queues of a LockMulti", "queues", len(queued), "err", err)
			}
			return struct{}{}, err
		}, nil)
	}
	for _, w := range st.waiters {
		w.stop()
	}
}
