package scripts

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
)

// State is a snapshot of one lock, as the inspect script reads it in one
// atomic step.
type State struct {
	Name      string        // the lock's name
	Held      bool          // whether an ownership holds the lock
	Owner     string        // the holder; empty when free
	Depth     int64         // reentry depth; 0 when free
	Token     fence.Token   // the holder's token; None when free or pending
	Pending   bool          // held on a Redlock node by a hold not yet given its token (qacquire.lua)
	TTL       time.Duration // what is left of the lease; 0 when free (a held lock always has a lease)
	Meta      string        // the holder's metadata (see reentrant.WithMetadata); empty when free or none
	LastToken fence.Token   // the last token issued for the name; None if never, or if a time-mode record expired
	Floor     fence.Token   // the floor of the name's slot (time tokens): every fresh token is above it; None if none
	LastOwner string        // the owner of the last ownership, the holder's when held; empty if none
	Levels    []string      // the level IDs of the hold, in no order; nil when free
	Waiters   int64         // Lock and LockMulti calls in the queue
	Ended     []Ended       // ownerships known to have ended, lowest token first
	Forced    *Forced       // the last forced unlock of the name; nil if none is recorded
}

// Forced is the record a forced unlock ([Force]) leaves: which ownership it
// ended, when (the server's clock), and who forced it.
type Forced struct {
	Token fence.Token
	At    time.Time
	By    string
}

// Ended is an ownership that has ended, as the lock hash records it: the
// last one while the lock is free, and the 16 most recent whose lease ran
// out.
type Ended struct {
	Token   fence.Token
	Owner   string
	Expired bool // its lease ran out, or it was forced; false: released
	Forced  bool // it was ended by a forced unlock (Expired is set too)
}

// Inspect runs inspect.lua. With time tokens m, a name with no hash is
// answered from the records of m's record time (lua/lib.lua), as a client
// with m wrote them; the strict counter's m reads none.
func Inspect(ctx context.Context, rdb redis.Scripter, k Keys, m Tokens) (State, error) {
	argv := []any{nil, nil, 4, k.arg(0), k.arg(1), k.arg(2), k.arg(floorKey)}
	if rec := m.RecordMillis(); rec > 0 {
		argv = append(argv, rec)
	}
	v, err := run(ctx, rdb, inspectScript, argv)
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
	if !ok || len(a) != 11 {
		return State{}, fmt.Errorf("%w: inspect returned %#v", ErrReply, v)
	}
	bad := func(what string, err error) (State, error) {
		return State{}, fmt.Errorf("%w: inspect %s: %v (reply %#v)", ErrReply, what, err, v)
	}
	var s State
	owner, _ := a[0].(string)
	s.Owner, s.Held = owner, owner != ""
	if a[8] != nil {
		if s.Meta, ok = a[8].(string); !ok || s.Owner == "" {
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
	if !ok || pttl < -2 || pttl == -1 || (pttl == -2) != (s.Owner == "") {
		return bad("pttl", nil)
	}
	if pttl > 0 {
		s.TTL = millis(pttl)
	}
	c, ok := a[3].(int64)
	if !ok || c < 0 {
		return bad("counter", nil)
	}
	s.LastToken = fence.Token(c)
	f, ok := a[10].(int64)
	if !ok || f < 0 {
		return bad("floor", nil)
	}
	s.Floor = fence.Token(f)
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
	s.LastOwner, _ = a[6].(string)
	ended, ok := a[7].([]any)
	if !ok || len(ended)%3 != 0 {
		return bad("ended", nil)
	}
	for i := 0; i < len(ended); i += 3 {
		ts, _ := ended[i].(string)
		owner, _ := ended[i+1].(string)
		how, _ := ended[i+2].(string)
		tok, err := fence.Parse(ts)
		if err != nil || tok == fence.None || (how != "expired" && how != "released" && how != "forced") {
			return bad("ended", err)
		}
		s.Ended = append(s.Ended, Ended{Token: tok, Owner: owner, Expired: how != "released", Forced: how == "forced"})
	}
	if a[9] != nil {
		f, ok := a[9].([]any)
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
	sort.Slice(s.Ended, func(i, j int) bool { return s.Ended[i].Token < s.Ended[j].Token })
	if (s.Owner == "") != (s.Token == fence.None && !s.Pending) || (s.Owner == "") != (s.Depth == 0) {
		return bad("fields", errors.New("owner, token and levels must be all present or all absent"))
	}
	return s, nil
}
