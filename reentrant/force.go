package reentrant

import (
	"context"
	"fmt"

	"github.com/redfence/redfence/fence"
)

// forceAttempts bounds how often ForceUnlock reads the holder anew when the
// lock changed hands between its read and its force.
const forceAttempts = 3

// ForceUnlock ends the current ownership of name, whoever holds it: the
// operator's way out of a stuck lock, where deleting the lock's keys by
// hand would be unsafe. The lock goes to the oldest waiter, as on a
// release; the fencing counter is untouched, so the next ownership gets a
// higher token and the forced holder's writes are refused by every fenced
// store once the next holder has written. Redis records the forced token,
// the time and this client's identity (see WithIdentity) until the forced
// lease would have ended; [Client.Inspect] reports it in [State.Forced].
// The forced holder's lease ends with ErrGone, saying who forced it, at its
// next renewal, Extend or Unlock.
//
// ForceUnlock returns the token of the ownership it ended. It is safe to
// retry: it reads the holder's token and ends that ownership only, so a
// repeat never ends the next holder's. It returns ErrNotHeld when the lock
// is free; ErrInvalid for a nil ctx or a bad name; ErrClosed after Close;
// ErrForeign for a foreign value; the context's error when ctx ended
// before Redis answered; Redis errors, wrapped.
func (c *Client) ForceUnlock(ctx context.Context, name string) (fence.Token, error) {
	tok, err := c.forceUnlock(ctx, name, fence.None)
	return tok, opErr("force unlock", name, err)
}

// ForceUnlockToken is ForceUnlock of the ownership with token tok only: a
// tool that showed an operator the holder (Inspect) and asked to confirm
// ends the ownership that was shown, or none. It returns ErrNotHeld when
// that ownership no longer holds the lock (it ended, or another holds it);
// ErrInvalid for a zero tok; other errors as ForceUnlock. Forcing an
// ownership that was forced already succeeds.
func (c *Client) ForceUnlockToken(ctx context.Context, name string, tok fence.Token) error {
	if tok == fence.None {
		return opErr("force unlock", name, invalid("token 0"))
	}
	_, err := c.forceUnlock(ctx, name, tok)
	return opErr("force unlock", name, err)
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
				if st.Pending {
					return fence.None, fmt.Errorf("%w: a Redlock hold is being acquired; try again", ErrNotHeld)
				}
				return fence.None, fmt.Errorf("%w: the lock is free", ErrNotHeld)
			}
			tok = st.Token
		}
		out := bounded(c, ctx, CleanupBudget/2, func(ctx context.Context) (forceResult, error) {
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
