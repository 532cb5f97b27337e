package scripts

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
)

// Proclaim runs proclaim.lua's proclaim: the election term of the
// ownership (owner, tok) gets value, keeping when it began. It reports
// false when that ownership does not hold the lock, or holds it without an
// election's metadata.
func Proclaim(ctx context.Context, rdb redis.Scripter, k Keys, owner string, tok fence.Token, value string) (bool, error) {
	v, err := run(ctx, rdb, proclaimScript, []any{nil, nil, 1, k.arg(0), "proclaim", tok.String(), owner, value})
	if err != nil {
		return false, scriptErr(err)
	}
	return parseFlag("proclaim", v)
}

// Stamp runs proclaim.lua's stamp: the election term with token tok, if it
// holds the lock with its start not yet stamped, gets the server's clock
// as its start. It returns the term's metadata and true while it holds the
// lock, false when it does not.
func Stamp(ctx context.Context, rdb redis.Scripter, k Keys, tok fence.Token) (string, bool, error) {
	v, err := run(ctx, rdb, proclaimScript, []any{nil, nil, 1, k.arg(0), "stamp", tok.String()})
	if err != nil {
		return "", false, scriptErr(err)
	}
	switch m := v.(type) {
	case int64:
		if m == 0 {
			return "", false, nil
		}
	case string:
		return m, true, nil
	}
	return "", false, fmt.Errorf("%w: proclaim returned %#v", ErrReply, v)
}
