package scripts

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
)

// State is a snapshot of one lock, as the inspect script reads it in one
// atomic step.
type State struct {
	Name    string        // the lock's name
	Held    bool          // whether an ownership holds the lock
	Owner   string        // the holder; empty when free
	Depth   int64         // reentry depth; 0 when free
	Token   fence.Token   // the holder's token; None when free or pending
	Pending bool          // held on a Redlock node by a hold not yet given its token (qacquire.lua)
	TTL     time.Duration // what is left of the lease; 0 when free
	Meta    string        // the holder's metadata (see reentrant.WithMetadata); empty when free or none
	Counter fence.Token   // the name's strict counter (P:{N}:t); None if none
	Floor   fence.Token   // the floor of the name's slot (time tokens); None if none
	Levels  []string      // the level IDs of the hold, in no order; nil when free
	Waiters int64         // Lock and LockMulti calls in the queue
	Forced  *Forced       // the last forced unlock of the name, while its record lives; nil if none
}

// Forced is the record a forced unlock ([Force]) leaves: which ownership it
// ended, when (the server's clock), and who forced it.
type Forced struct {
	Token fence.Token
	At    time.Time
	By    string
}

// Inspect runs inspect.lua.
func Inspect(ctx context.Context, rdb redis.Scripter, k Keys) (State, error) {
	v, err := run(ctx, rdb, inspectScript, []any{nil, nil, 5, k.arg(lockKey), k.arg(queueKey), k.arg(counterKey),
		k.arg(floorKey), k.arg(forcedKey)})
	if err != nil {
		return State{}, scriptErr(err)
	}
	s, err := parseInspect(v)
	s.Name = k.Name
	return s, err
}

// parseInspect decodes an inspect reply.
func parseInspect(v any) (State, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 9 {
		return State{}, fmt.Errorf("%w: inspect returned %#v", ErrReply, v)
	}
	bad := func(what string, err error) (State, error) {
		return State{}, fmt.Errorf("%w: inspect %s: %v (reply %#v)", ErrReply, what, err, v)
	}
	var s State
	owner, _ := a[0].(string)
	s.Owner, s.Held = owner, owner != ""
	if a[6] != nil {
		if s.Meta, ok = a[6].(string); !ok || s.Owner == "" {
			return bad("meta", nil)
		}
	}
	if t, ok := a[1].(string); ok && t == "pending" && s.Owner != "" {
		s.Pending = true
	} else if ok {
		tok, err := fence.Parse(t)
		if err != nil || tok == fence.None {
			return bad("token", err)
		}
		s.Token = tok
	}
	pttl, ok := a[2].(int64)
	if !ok || pttl < -2 || (pttl == -2) != (s.Owner == "") {
		return bad("pttl", nil)
	}
	if pttl > 0 {
		s.TTL = millis(pttl)
	}
	c, ok1 := a[3].(int64)
	f, ok2 := a[8].(int64)
	if !ok1 || !ok2 || c < 0 || f < 0 {
		return bad("counter", nil)
	}
	s.Counter, s.Floor = fence.Token(c), fence.Token(f)
	levels, ok := a[4].([]any)
	if !ok {
		return bad("levels", nil)
	}
	for _, l := range levels {
		id, ok := l.(string)
		if !ok {
			return bad("levels", nil)
		}
		s.Levels = append(s.Levels, id)
	}
	s.Depth = int64(len(s.Levels))
	if s.Waiters, ok = a[5].(int64); !ok || s.Waiters < 0 {
		return bad("waiters", nil)
	}
	if a[7] != nil {
		f, ok := a[7].([]any)
		if !ok || len(f) != 3 {
			return bad("forced", nil)
		}
		ts, _ := f[0].(string)
		at, ok1 := f[1].(int64)
		by, ok2 := f[2].(string)
		tok, err := fence.Parse(ts)
		if err != nil || tok == fence.None || !ok1 || !ok2 {
			return bad("forced", err)
		}
		s.Forced = &Forced{Token: tok, At: time.UnixMilli(at), By: by}
	}
	if (s.Owner == "") != (s.Token == fence.None && !s.Pending) || (s.Owner == "") != (s.Depth == 0) {
		return bad("fields", errors.New("owner, token and levels must be all present or all absent"))
	}
	return s, nil
}
