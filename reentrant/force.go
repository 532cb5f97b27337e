package reentrant

import (
	"context"
	"fmt"

	"github.com/redfence/redfence/fence"
)

// forceAttempts bounds how often ForceUnlock reads the holder anew when the
// lock changed hands between its read and its force.
const forceAttempts = 3

// ForceUnlock ends an ownership of name: the one with token tok, or with
// tok fence.None the current one, whoever holds it. It is the operator's
// way out of a stuck lock, where deleting the lock's keys by hand would be
// unsafe; a tool that showed the holder (Inspect) and asked to confirm
// passes its token, so as to end the ownership that was shown or none.
// The lock goes to the oldest waiter, as on a release; the next ownership
// gets a higher token, so every fenced store refuses the forced holder's
// writes once the next holder has written. Redis records the forced token,
// the time and this client's identity ("<hostname>/<pid>") until the forced
// lease would have ended, for [State.Forced]. The forced holder's lease ends
// with ErrGone, saying who forced it, at its next renewal, Extend or Unlock.
//
// ForceUnlock returns the token of the ownership it ended. It is safe to
// retry: it never ends a later ownership. It returns ErrNotHeld when the
// lock is free or, for a tok given, that ownership no longer holds it
// (forcing one that was forced already succeeds); ErrInvalid for a nil ctx
// or a bad name; ErrClosed after Close; ErrForeign for a foreign value; the
// context's error when ctx ended before Redis answered; Redis errors,
// wrapped.
func (c *Client) ForceUnlock(ctx context.Context, name string, tok fence.Token) (fence.Token, error) {
	tok, err := c.forceUnlock(ctx, name, tok)
	return tok, opErr("force unlock", name, err)
}

// forceUnlock forces want, or with want None the holder it reads.
func (c *Client) forceUnlock(ctx context.Context, name string, want fence.Token) (fence.Token, error) {
	if err := c.ready(ctx, name); err != nil {
		return fence.None, err
	}
	for range forceAttempts {
		tok := want
		if tok == fence.None {
			st, err := c.inspect(ctx, name)
			if err != nil {
				return fence.None, err
			}
			if st.Token == fence.None {
				if st.Held {
					return fence.None, fmt.Errorf("%w: a Redlock hold is being acquired; try again", ErrNotHeld)
				}
				return fence.None, fmt.Errorf("%w: the lock is free", ErrNotHeld)
			}
			tok = st.Token
		}
		out := bounded(c, ctx, cleanupBudget/2, func(ctx context.Context) (forceResult, error) {
			return c.be.force(ctx, lockRef{name: name}, tok)
		}, nil)
		if out.err != nil {
			return fence.None, out.err
		}
		r := out.v
		switch {
		case r.ended || r.repeat:
			c.cfg.log.Warn("reentrant: lock forced open", "name", name, "token", uint64(tok), "by", c.cfg.identity)
			return tok, nil
		case want != fence.None:
			return fence.None, fmt.Errorf("%w: token %d no longer holds the lock (holder: %s)", ErrNotHeld, want, holderText(r.holder))
		case r.holder == fence.None:
			return fence.None, fmt.Errorf("%w: the lock is free", ErrNotHeld)
		}
		// The lock changed hands between the read and the force: read again.
	}
	return fence.None, fmt.Errorf("%w: the lock changed hands %d times while forcing it", ErrNotHeld, forceAttempts)
}

func holderText(t fence.Token) string {
	if t == fence.None {
		return "none"
	}
	return "token " + t.String()
}
