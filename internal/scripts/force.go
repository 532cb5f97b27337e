package scripts

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
)

// ForceResult is the reply of [Force].
type ForceResult struct {
	// Ended is set when the ownership held the lock and this call ended it.
	Ended bool
	// Repeat is set when the ownership had been forced already (a retry).
	Repeat bool
	// Holder is the token of the ownership holding the lock when neither is
	// set; None when the lock is free.
	Holder fence.Token
}

// Force runs force.lua: it ends the ownership with token tok, whoever
// holds it, records by as who forced it, and hands the lock to the oldest
// waiter, whose token is issued as m says. See the script's header.
func Force(ctx context.Context, rdb redis.Scripter, k Keys, tok fence.Token, by string, m Tokens) (ForceResult, error) {
	v, err := run(ctx, rdb, forceScript, []any{nil, nil, 4, k.arg(lockKey), k.arg(queueKey), k.counter(m),
		k.arg(forcedKey), tok.String(), by, m.arg()})
	if err != nil {
		return ForceResult{}, scriptErr(err)
	}
	a, ok := v.([]any)
	if ok && len(a) == 2 {
		kind, ok1 := a[0].(int64)
		t, ok2 := a[1].(int64)
		if ok1 && ok2 && t >= 0 {
			switch {
			case kind == 1 && fence.Token(t) == tok:
				return ForceResult{Ended: true}, nil
			case kind == 2 && fence.Token(t) == tok:
				return ForceResult{Repeat: true}, nil
			case kind == 0:
				return ForceResult{Holder: fence.Token(t)}, nil
			}
		}
	}
	return ForceResult{}, fmt.Errorf("%w: force returned %#v", ErrReply, v)
}
