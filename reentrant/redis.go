package reentrant

// What the two Redis backends (single and quorum) share: the keys of a
// lock, the request the scripts see, their replies as the Client's own,
// and the check of a server's eviction policy.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/scripts"
)

// redisCall is a lock call of a Redis backend: the call, and its lock's
// keys, made once. Each backend's state of a call starts with it.
type redisCall struct {
	call
	keys scripts.Keys
}

// keyspace is where a Redis backend's lock keys are: under prefix, every
// key of a name in its slot (scripts.KeysFor), on every deployment.
type keyspace struct {
	prefix string
}

// keys returns the keys of the lock name in ks.
func (ks keyspace) keys(name string) scripts.Keys { return scripts.KeysFor(ks.prefix, name) }

// init makes rc the call r of a lock in ks, whose backend state is be (the
// struct rc is part of), and returns the call.
func (rc *redisCall) init(r call, ks keyspace, be any) *call {
	rc.call = r
	if r.hold.kind != 0 {
		rc.keys = scripts.SharedKeys(ks.prefix, r.name, r.hold.kind, string(r.owner))
	} else {
		rc.keys = ks.keys(r.name)
	}
	rc.ref = lockRef{name: r.name, keys: &rc.keys}
	rc.be = be
	return &rc.call
}

// keysOf returns the keys of ref's lock in ks: those a call made once, or,
// for a lockRef{name}, made now.
func keysOf(ref lockRef, ks keyspace) scripts.Keys {
	if k, ok := ref.keys.(*scripts.Keys); ok {
		return *k
	}
	return ks.keys(ref.name)
}

// tokensOf is how the scripts issue a fresh token for a client of cfg.
func tokensOf(cfg config) scripts.Tokens {
	return scripts.NewTokens(cfg.timeTokens(), cfg.floorIdle)
}

// requestOf is r's acquisition as the scripts see it, without a queue.
func requestOf(r *call, t scripts.Tokens) scripts.Request {
	meta := r.cfg.meta
	if r.hold.kind != 0 {
		// A shared lock's queue entry carries its kind (lua/shared.lua).
		meta = string(r.hold.kind)
		if r.hold.kind == 's' {
			meta += strconv.Itoa(r.hold.permits)
		}
	}
	return scripts.Request{Owner: string(r.owner), Level: r.level, TTL: r.cfg.ttl, Meta: meta,
		MaxDepth: r.cfg.maxDepth, Tokens: t}
}

// acquiredOf is the acquire script's reply as a grant or a refusal.
func acquiredOf(a scripts.Acquired) acquired {
	return acquired{ok: a.OK, token: a.Token, depth: a.Depth, holderTTL: a.HolderTTL, slot: a.Slot}
}

// prepared returns the renewals' script requests, made once for each
// extendReq and kept in its prep.
func prepared(reqs []*extendReq, ks keyspace) []scripts.ExtendReq {
	out := make([]scripts.ExtendReq, len(reqs))
	for i, r := range reqs {
		p, ok := r.prep.(*scripts.ExtendReq)
		if !ok {
			x := scripts.NewExtendReq(keysOf(r.ref, ks), string(r.owner), r.token, r.ttl)
			p = &x
			r.prep = p
		}
		out[i] = *p
	}
	return out
}

// extendResults are the renewals' replies as the Client's own.
func extendResults(res []scripts.ExtendResult) []extendResult {
	out := make([]extendResult, len(res))
	for i, r := range res {
		out[i] = extendResult{held: r.Held, forced: forcedOf(r.Forced), sent: r.Sent, err: r.Err}
	}
	return out
}

// releasedOf is the release script's reply as the Client's own.
func releasedOf(r scripts.Released) released {
	return released{left: r.Depth, free: r.Free, forced: forcedOf(r.Forced)}
}

// forceResultOf is the force script's reply as the Client's own.
func forceResultOf(r scripts.ForceResult) forceResult {
	return forceResult{ended: r.Ended, repeat: r.Repeat, holder: r.Holder}
}

// stateOf is the inspect script's reply as the State callers get, for a
// client whose tokens come from the floor (time) or the name's counter:
// the one place the scripts' state becomes a State.
func stateOf(s scripts.State, time bool) State {
	st := State{Name: s.Name, Held: s.Held, Owner: s.Owner, Depth: s.Depth, Token: s.Token,
		TTL: s.TTL, Meta: s.Meta, LastToken: s.Counter, Levels: s.Levels, Waiters: s.Waiters,
		Forced: forcedOf(s.Forced)}
	if time {
		st.LastToken = s.Floor
	}
	return st
}

// forcedOf is a forced unlock's record as the Client's own; nil for nil.
func forcedOf(f *scripts.Forced) *Forced {
	if f == nil {
		return nil
	}
	out := Forced(*f)
	return &out
}

// isReply reports whether err is an error reply from the server.
func isReply(err error) bool {
	var r redis.Error
	return errors.As(err, &r) && !errors.Is(err, redis.ErrClosed) && !errors.Is(err, redis.ErrPoolTimeout)
}

// evicting lists the maxmemory policies that may evict keys without a TTL,
// such as the fencing counter. An evicted counter starts again at 1, and
// every fenced store that remembers a higher token then refuses the new
// holders. The volatile-* policies evict only keys with a TTL (a lock hash
// whose holder then loses it, which fencing covers), and noeviction none.
var evicting = map[string]bool{"allkeys-lru": true, "allkeys-lfu": true, "allkeys-random": true}

// noEvictionCheck reports a client of cfg whose servers' eviction policy
// need not be checked: withEvictionAllowed (tests) accepts the risk, and with time
// tokens (the default) an evicted floor is a lost one, after
// which the next token comes from the server's clock, above every earlier
// one unless that clock stepped back (they carry a TTL anyway, so
// volatile-* policies may evict them too). Only WithStrictTokens checks.
func noEvictionCheck(cfg config) bool { return cfg.allowEviction || cfg.timeTokens() }

// policyOf reads one server's policy with CONFIG GET, or from INFO where
// CONFIG is renamed or forbidden. A server that reports no policy through
// either (a Redis-compatible server without maxmemory, such as miniredis)
// is taken as one that does not evict.
func policyOf(ctx context.Context, rdb redis.Cmdable) error {
	policy, err := configPolicy(ctx, rdb)
	if err != nil {
		return err
	}
	if evicting[policy] {
		return fmt.Errorf("%w: maxmemory-policy is %s, so tokens could restart at 1; "+
			"use noeviction or a volatile-* policy, or time tokens (no WithStrictTokens)", ErrEvictionPolicy, policy)
	}
	return nil
}

func configPolicy(ctx context.Context, rdb redis.Cmdable) (string, error) {
	m, cerr := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if cerr == nil && m["maxmemory-policy"] != "" {
		return m["maxmemory-policy"], nil
	}
	if cerr != nil && !isReply(cerr) {
		return "", fmt.Errorf("reading the server's maxmemory-policy: %w", cerr)
	}
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		if isReply(err) {
			return "", nil
		}
		return "", fmt.Errorf("reading the server's maxmemory-policy: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok {
			return v, nil
		}
	}
	return "", nil
}
