package reentrant

import (
	"context"

	"github.com/redfence/redfence/fence"
)

// Do runs fn while holding name, then unlocks, also when fn panics (the
// panic then continues). fn gets the lease's context, which ends if the
// lease is lost or ctx ends, and the fencing token to pass to every fenced
// write. opts apply to the Lock (see [Option]).
//
// Do returns Lock's error, or fn's error joined with Unlock's (ErrNotHeld
// when the lease was lost while fn ran). Unlock runs even when ctx has
// ended, bounded by one TTL. A nil fn is ErrInvalid; nothing is acquired.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context, token fence.Token) error, opts ...Option) (err error) {
	if fn == nil {
		return opErr("do", name, invalid("nil function"))
	}
	l, err := c.Lock(ctx, name, opts...)
	if err != nil {
		return err
	}
	// fn's context ends with the lease or with ctx, whichever comes first:
	// Do's caller owns fn's lifetime, unlike a bare Lock's.
	fctx, stop := context.WithCancelCause(l.Context())
	defer stop(nil)
	unhook := context.AfterFunc(ctx, func() { stop(context.Cause(ctx)) })
	defer unhook()
	// Deferred, so that a panicking fn releases the lock too instead of
	// leaving it held and renewed until Close.
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.own.cfg.ttl)
		defer cancel()
		err = joinWith("; ", []error{err, l.Unlock(uctx)})
	}()
	return fn(fctx, l.Token())
}
