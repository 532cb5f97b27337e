package scripts

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
)

// MultiRequest is one attempt of a LockMulti call at the names of one
// script (multi.lua): one owner, lease and metadata for every name, and
// one level ID per name.
type MultiRequest struct {
	Owner    string
	TTL      time.Duration // the lease; whole milliseconds
	Meta     string        // metadata of each fresh ownership, "" for none
	MaxDepth int64         // the deepest hold a reentry may make; 0: no limit
	Tokens   Tokens
	Levels   []string // one per key set, in the same order
	// Wake is the call's queue entry (WakeMember) when it waits, "" when
	// not; Queue is then the queue's expiry.
	Wake  string
	Queue time.Duration
	// Again: an earlier attempt may have queued the call (Request.Again).
	Again bool
}

// MultiReply is multi.lua's answer.
type MultiReply struct {
	OK bool // every name was taken
	// Tokens and Depths, when OK: one per name, in the request's order.
	Tokens []fence.Token
	Depths []int64
	// Blocked, when neither OK nor TooDeep: the indices of the names held
	// by another owner or waited for by a Lock call, rising.
	Blocked []int
	// HolderTTL, with Blocked: the least left of their holders' leases;
	// -1 when none of them is held.
	HolderTTL time.Duration
	// TooDeep is the index of a name the owner holds at MaxDepth already,
	// -1 for none; Tokens[0] and Depths[0] are then its token and depth.
	TooDeep int
}

// WakeMember returns the queue entry of a LockMulti call with ID id (no
// newline) that waits on w's channel: a release publishes "*<id> 0" there
// instead of handing it the lock (queue.lua, isWake). Its owner is
// "\x01", which no lock call's is (reentrant refuses control characters
// in an owner): a script of an earlier version, which does not
// know such entries, would hand the lock to it as to a Lock call, and the
// lock, unclaimed, passes on after the entry's 1 ms claim time without
// ever counting as the LockMulti owner's.
func WakeMember(id string, w Waiter) string {
	kind := "p"
	if w.Sharded {
		kind = "s"
	}
	return "*" + id + "\n1\n\x01\n\n" + kind + w.Channel
}

// Multi runs multi.lua on the names whose keys are ks (every key in one
// slot on a Cluster): all are taken for r.Owner, or none is.
func Multi(ctx context.Context, rdb redis.Scripter, ks []Keys, r *MultiRequest) (MultiReply, error) {
	if len(ks) == 0 || len(ks) != len(r.Levels) {
		return MultiReply{}, fmt.Errorf("scripts: %d key sets for %d levels", len(ks), len(r.Levels))
	}
	argv := make([]any, 0, 3+4*len(ks)+8+len(ks))
	argv = append(argv, nil, nil, 4*len(ks))
	for i := range ks {
		k := &ks[i]
		argv = append(argv, k.arg(lockKey), k.arg(queueKey), k.counter(r.Tokens), k.other(r.Tokens))
	}
	depth := int64(1<<31 - 1)
	if r.MaxDepth > 0 {
		depth = r.MaxDepth
	}
	again := "0"
	if r.Again {
		again = "1"
	}
	argv = append(argv, r.Owner, r.TTL.Milliseconds(), r.Tokens.arg(), r.Meta, depth, r.Wake,
		max(r.Queue.Milliseconds(), 1), again)
	for _, l := range r.Levels {
		argv = append(argv, l)
	}
	v, err := run(ctx, rdb, multiScript, argv)
	if err != nil {
		return MultiReply{}, scriptErr(err)
	}
	return parseMulti(v, len(ks))
}

// parseMulti decodes a multi reply for n names.
func parseMulti(v any, n int) (MultiReply, error) {
	bad := func() (MultiReply, error) {
		return MultiReply{}, fmt.Errorf("%w: multi returned %#v", ErrReply, v)
	}
	a, ok := v.([]any)
	if !ok || len(a) < 2 {
		return bad()
	}
	// Tokens come as integers or decimal strings (a time token is the
	// server's clock as the script built it).
	ns := make([]int64, len(a))
	for i := range a {
		switch x := a[i].(type) {
		case int64:
			ns[i] = x
		case string:
			t, err := fence.Parse(x)
			if err != nil {
				return bad()
			}
			ns[i] = int64(t)
		default:
			return bad()
		}
	}
	rep := MultiReply{TooDeep: -1}
	switch ns[0] {
	case 1:
		if len(ns) != 1+2*n {
			return bad()
		}
		rep.OK = true
		for i := range n {
			t, d := ns[1+2*i], ns[2+2*i]
			if t <= 0 || d <= 0 {
				return bad()
			}
			rep.Tokens = append(rep.Tokens, fence.Token(t))
			rep.Depths = append(rep.Depths, d)
		}
	case 0:
		if len(ns) < 3 {
			return bad()
		}
		rep.HolderTTL = time.Duration(ns[1]) * time.Millisecond
		if ns[1] < 0 {
			rep.HolderTTL = -1
		}
		for _, i := range ns[2:] {
			if i < 1 || i > int64(n) || (len(rep.Blocked) > 0 && int(i)-1 <= rep.Blocked[len(rep.Blocked)-1]) {
				return bad()
			}
			rep.Blocked = append(rep.Blocked, int(i)-1)
		}
	case 2:
		if len(ns) != 4 || ns[1] < 1 || ns[1] > int64(n) {
			return bad()
		}
		rep.TooDeep = int(ns[1]) - 1
		rep.Tokens, rep.Depths = []fence.Token{fence.Token(ns[2])}, []int64{ns[3]}
	default:
		return bad()
	}
	return rep, nil
}

// MultiMax is how many names one multi.lua call may take: its KEYS and
// ARGV grow with them, and one script holds the server for all of them.
const MultiMax = 256
