package reentrant

import (
	"context"
	"fmt"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/lua"
)

// ownership is this process's record of one ownership of one lock: the
// leases that share its token, and the renewal that keeps it alive. It ends
// (ctx cancelled) when the lock is released or lost, when the Client closes,
// or when every lease of it in this process has been unlocked; renewal
// stops then.
type ownership struct {
	c      *Client
	key    string
	name   string
	keys   lua.Keys
	owner  Owner
	token  fence.Token
	refs   int // live leases; guarded by c.mu
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func (c *Client) newOwnership(key, name string, k lua.Keys, owner Owner, tok fence.Token, sent time.Time) *ownership {
	ctx, cancel := context.WithCancelCause(context.Background())
	o := &ownership{c: c, key: key, name: name, keys: k, owner: owner, token: tok, ctx: ctx, cancel: cancel}
	if c.cfg.renew > 0 {
		go o.renew(sent)
	}
	return o
}

func (o *ownership) end(cause error) { o.cancel(cause) }

// dropRef forgets one lease of o once that lease has ended; the last one
// ends o and its renewal. When the lock is still held in Redis at that point
// (its other levels belong to the same owner elsewhere), it expires after at
// most one TTL unless renewed there.
func (c *Client) dropRef(o *ownership) {
	c.mu.Lock()
	o.refs--
	last := o.refs == 0
	if last && c.owns[o.key] == o {
		delete(c.owns, o.key)
	}
	c.mu.Unlock()
	if last {
		o.end(ErrReleased)
	}
}

// renew extends the lease every renew interval. It declares the lease lost
// when Redis says the ownership is gone, or when renewals keep failing and
// the next attempt would come after the lease may have expired: the holder
// is told to stop at least half a renew interval before another owner can
// be granted the lock, as long as this host's and Redis's clocks drift less
// than that per TTL. With the default TTL/3 interval that means after two
// failed renewals in a row.
func (o *ownership) renew(lastSent time.Time) {
	cfg := o.c.cfg
	t := time.NewTicker(cfg.renew)
	defer t.Stop()
	for {
		select {
		case <-o.ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		ctx, cancel := context.WithTimeout(o.ctx, cfg.renew)
		ok, err := lua.Extend(ctx, o.c.rdb, o.keys, string(o.owner), o.token, cfg.ttl)
		cancel()
		switch {
		case o.ctx.Err() != nil:
			return
		case err == nil && ok:
			lastSent = sent
		case err == nil:
			o.end(fmt.Errorf("%w: %q token %d: renewal found it expired or taken by another ownership", ErrLost, o.name, o.token))
			return
		case time.Since(lastSent)+cfg.renew+cfg.renew/2 >= cfg.ttl:
			// The next tick may come after the lease ran out; half an
			// interval of margin absorbs the ticker's and the call's delay.
			o.end(fmt.Errorf("%w: %q token %d: could not renew before the lease ran out: %w", ErrLost, o.name, o.token, err))
			return
		}
	}
}
