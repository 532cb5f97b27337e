package scripts

import (
	"context"
	"fmt"
	"math"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
)

// The read-write lock's and the semaphore's scripts (sacquire.lua,
// srelease.lua, sinspect.lua; their keys in shared.lua). The wrappers of a
// lock's scripts (Acquire, Abandon, Release, Extend) run them for Keys made
// by SharedKeys.

// RWPrefix and SemPrefix end the prefix of a read-write lock's and a
// semaphore's keys: a name's RW lock, semaphore and lock are three locks.
const (
	RWPrefix  = ":rw"
	SemPrefix = ":sem"
)

// SharedKeys returns the keys of owner's hold of kind ('r' a reader, 'w'
// the writer, of a read-write lock; 's' a permit of a semaphore) on name,
// under prefix (the client's), every one in the slot of the name.
func SharedKeys(prefix, name string, kind byte, owner string) Keys {
	p := prefix + RWPrefix
	if kind == 's' {
		p = prefix + SemPrefix
	}
	k := KeysFor(p, name)
	k.Kind, k.Base, k.Index = kind, k.Lock, k.Lock+":r"
	if kind == 's' {
		k.Index = k.Lock + ":h"
	}
	if kind != 'w' {
		k.Lock = k.Index + ":" + owner
		k.args[lockKey] = argOf(k.Lock)
	}
	return k
}

// counterKey is the key of tokens issued in mode m; otherKey the other
// mode's (as Keys.counter and Keys.other, as strings).
func (k *Keys) counterKey(m Tokens) string {
	if m.Time {
		return k.Floor
	}
	return k.Counter
}

func (k *Keys) otherKey(m Tokens) string {
	if m.Time {
		return k.Counter
	}
	return k.Floor
}

func acquireShared(ctx context.Context, rdb redis.Scripter, k Keys, r *Request) (Acquired, error) {
	v, err := run(ctx, rdb, sacquireScript, sharedAcquireArgs(k, r))
	if err != nil {
		return Acquired{}, scriptErr(err)
	}
	return parseShared(v)
}

// sharedAcquireArgs returns sacquire.lua's command for r, as run takes it:
// {nil, nil, numkeys, keys..., args...}.
func sharedAcquireArgs(k Keys, r *Request) []any {
	argv := make([]any, 0, 14)
	argv = append(argv, nil, nil, 3, k.Base, k.counterKey(r.Tokens), k.otherKey(r.Tokens),
		r.Owner, r.TTL.Milliseconds(), r.Level, r.Tokens.arg(), r.Meta)
	// Optional arguments at their defaults are left out (acquireArgs).
	opt := [4]any{"", "", "", ""}
	n := 0
	if r.Waiter != nil {
		opt[0], opt[1], n = string(r.appendMember(nil)), max(r.Waiter.Queue.Milliseconds(), 1), 2
	}
	if r.MaxDepth != DefaultMaxDepth {
		opt[2], n = r.MaxDepth, 3
		if r.MaxDepth <= 0 {
			opt[2] = int64(math.MaxInt32)
		}
	}
	if r.Again {
		opt[3], n = "1", 4
	}
	return append(argv, opt[:n]...)
}

// parseShared decodes a sacquire reply.
func parseShared(v any) (Acquired, error) {
	a, ok := v.([]any)
	if !ok || len(a) < 3 || len(a) > 4 {
		return Acquired{}, fmt.Errorf("%w: sacquire returned %#v", ErrReply, v)
	}
	var n [4]int64
	for i := range a {
		switch x := a[i].(type) {
		case int64:
			n[i] = x
		case string:
			t, err := fence.Parse(x)
			if err != nil || i != 1 {
				return Acquired{}, fmt.Errorf("%w: sacquire returned %#v", ErrReply, v)
			}
			n[i] = int64(t)
		default:
			return Acquired{}, fmt.Errorf("%w: sacquire returned %#v", ErrReply, v)
		}
	}
	switch {
	case n[0] == 1 && n[1] > 0 && n[2] > 0 && len(a) == 4:
		return Acquired{OK: true, Token: fence.Token(n[1]), Depth: n[2], Slot: int(n[3])}, nil
	case n[0] == 2 && n[1] > 0 && n[2] > 0:
		return Acquired{TooDeep: true, Token: fence.Token(n[1]), Depth: n[2]}, nil
	case n[0] == 0 && n[1] == -1 && n[2] == 0:
		return Acquired{HolderTTL: -1}, nil
	case n[0] == 0 && n[1] >= 0 && n[2] == 0:
		return Acquired{HolderTTL: millis(n[1])}, nil
	}
	return Acquired{}, fmt.Errorf("%w: sacquire returned %#v", ErrReply, v)
}

// sreleaseArgs returns srelease.lua's arguments: op "r" releases the
// ownership with token (tok), "a" undoes the acquisition (level, and the
// queue entry member).
func sreleaseArgs(k Keys, owner, tok, level string, m Tokens, member, op string) []any {
	argv := []any{nil, nil, 3, k.Base, k.counterKey(m), k.otherKey(m), owner, tok, level, m.arg(), string(k.Kind)}
	if op == "a" {
		argv = append(argv, op, member)
	}
	return argv
}

func releaseShared(ctx context.Context, rdb redis.Scripter, k Keys, owner string, token fence.Token, level string, m Tokens) (Released, error) {
	v, err := run(ctx, rdb, sreleaseScript, sreleaseArgs(k, owner, token.String(), level, m, "", "r"))
	if err != nil {
		return Released{}, scriptErr(err)
	}
	return parseRelease(v, token)
}

func abandonShared(ctx context.Context, rdb redis.Scripter, k Keys, r *Request) (bool, error) {
	v, err := run(ctx, rdb, sreleaseScript, sreleaseArgs(k, r.Owner, "", r.Level, r.Tokens, string(r.appendMember(nil)), "a"))
	if err != nil {
		return false, scriptErr(err)
	}
	return parseFlag("srelease", v)
}

// SharedHolder is one hold of a read-write lock or a semaphore, as
// InspectShared reads it.
type SharedHolder struct {
	Owner  string
	Token  fence.Token
	PTTL   int64 // ms
	Slot   int   // a permit's; -1 otherwise
	Kind   byte  // 'w', 'r' or 's'
	Levels []string
}

// SharedState is a read-write lock's or a semaphore's state.
type SharedState struct {
	Holders []SharedHolder // the writer first
	Waiters int64
	Epoch   fence.Token // RW: the last write lease's token, None when unknown
	Permits int64       // a live semaphore's count, 0 when none holds it
	Counter fence.Token // the strict counter
	Floor   fence.Token // the slot's floor
}

// InspectShared reads the state of the read-write lock (kind 'r' or 'w')
// or the semaphore ('s') whose keys are k, writing nothing.
func InspectShared(ctx context.Context, rdb redis.Scripter, k Keys) (SharedState, error) {
	kind := "w"
	if k.Kind == 's' {
		kind = "s"
	}
	v, err := run(ctx, rdb, sinspectScript, []any{nil, nil, 3, k.Base, k.Counter, k.Floor, kind})
	if err != nil {
		return SharedState{}, scriptErr(err)
	}
	bad := fmt.Errorf("%w: sinspect returned %#v", ErrReply, v)
	a, ok := v.([]any)
	if !ok || len(a) != 6 {
		return SharedState{}, bad
	}
	var st SharedState
	hs, ok1 := a[0].([]any)
	n, ok2 := a[1].(int64)
	cnt, ok3 := a[3].(int64)
	c, ok4 := a[4].(int64)
	f, ok5 := a[5].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return SharedState{}, bad
	}
	st.Waiters, st.Permits, st.Counter, st.Floor = n, cnt, fence.Token(c), fence.Token(f)
	if e, ok := a[2].(string); ok {
		if st.Epoch, err = fence.Parse(e); err != nil {
			return SharedState{}, bad
		}
	}
	for _, h := range hs {
		r, ok := h.([]any)
		if !ok || len(r) != 6 {
			return SharedState{}, bad
		}
		var x SharedHolder
		var ts, kind string
		var ok1, ok2, ok3, ok4, ok5 bool
		x.Owner, ok1 = r[0].(string)
		ts, ok2 = r[1].(string)
		x.PTTL, ok3 = r[2].(int64)
		slot, ok4 := r[3].(int64)
		kind, ok5 = r[4].(string)
		levels, ok6 := r[5].([]any)
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || len(kind) != 1 {
			return SharedState{}, bad
		}
		if x.Token, err = fence.Parse(ts); err != nil {
			return SharedState{}, bad
		}
		x.Slot, x.Kind = int(slot), kind[0]
		for _, l := range levels {
			s, ok := l.(string)
			if !ok {
				return SharedState{}, bad
			}
			x.Levels = append(x.Levels, s)
		}
		st.Holders = append(st.Holders, x)
	}
	return st, nil
}
