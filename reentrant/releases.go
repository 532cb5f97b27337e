package reentrant

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/lua"
)

// Release is a recent full release of a lock, as its tombstone records it:
// which level's Unlock freed the lock, for which owner and token. Tombstones
// live for the retry window (see [WithRetryWindow]), so that a retried
// release is recognised; Releases reads them for tools and post-mortems.
type Release struct {
	Level string        // the ID of the level whose Unlock freed the lock ([Lease.ID])
	Owner Owner         // the owner that released
	Token fence.Token   // the ownership's token
	TTL   time.Duration // how much longer the tombstone is kept
}

// Releases lists the recent full releases of name, oldest tombstone
// expiry first. It scans the keyspace (SCAN with a pattern, on the node that
// holds the name's slot), so it is for tools, not for hot paths, and is not
// atomic with Inspect. It returns ErrInvalid for a nil ctx or a bad name,
// ErrClosed after Close, lua.ErrForeign for a tombstone key holding a value
// this library did not write, and Redis errors wrapped.
func (c *Client) Releases(ctx context.Context, name string) ([]Release, error) {
	if ctx == nil {
		return nil, invalid("releases %q: nil context", name)
	}
	if err := lua.CheckName(name); err != nil {
		return nil, invalid("%v", err)
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	k := c.keys(name)
	var node redis.Cmdable = c.rdb
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		n, err := cc.MasterForKey(ctx, k.Lock)
		if err != nil {
			return nil, fmt.Errorf("reentrant: releases %q: %w", name, err)
		}
		node = n
	}
	stem := k.TombstoneFor("")
	var out []Release
	iter := node.Scan(ctx, 0, globEscaper.Replace(stem)+"*", 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		v, err := node.Get(ctx, key).Result()
		if err == redis.Nil {
			continue // expired since the scan saw it
		}
		if err != nil {
			return nil, fmt.Errorf("reentrant: releases %q: %w", name, err)
		}
		tok, owner, ok := strings.Cut(v, " ")
		t, perr := fence.Parse(tok)
		if !ok || perr != nil || t == fence.None {
			return nil, fmt.Errorf("reentrant: releases %q: %w: %s holds %q", name, lua.ErrForeign, key, v)
		}
		ttl, err := node.PTTL(ctx, key).Result()
		if err != nil {
			return nil, fmt.Errorf("reentrant: releases %q: %w", name, err)
		}
		out = append(out, Release{Level: strings.TrimPrefix(key, stem), Owner: Owner(owner), Token: t, TTL: ttl})
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("reentrant: releases %q: %w", name, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TTL < out[j].TTL })
	return out, nil
}

// globEscaper quotes SCAN MATCH's special characters, which lock names and
// prefixes may contain.
var globEscaper = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
