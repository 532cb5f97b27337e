package history

import (
	"context"
	"errors"
	"strings"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
)

// Do records one operation with input in: it calls fn and records out as
// the output when err is nil, and an unknown outcome (crashing c) when err
// is not. So fn turns definite refusals into outputs and leaves every error
// that leaves the outcome open as an error. Do returns fn's error.
func (c *Client) Do(in any, fn func() (out any, err error)) error {
	op := c.Begin(in)
	out, err := fn()
	if err != nil {
		op.Unknown(err)
		return err
	}
	op.End(out)
	return nil
}

// ended reports an error caused by a context that ended: the request may
// have reached the server before the client gave up, so it proves nothing.
func ended(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// owner is the owner ctx acts for. The recording needs it up front, so a
// context without one is a bug in the test.
func owner(ctx context.Context) string {
	o, ok := reentrant.OwnerFrom(ctx)
	if !ok {
		panic("history: lock call with a context that carries no owner")
	}
	return string(o)
}

// TryLock calls l.TryLock(ctx, name) and records an [Acquire] by ctx's
// owner, which ctx must carry. A refusal (ErrNotAcquired and no context
// error) is a definite answer; every other error is an unknown outcome.
func (c *Client) TryLock(ctx context.Context, l *reentrant.Client, name string) (*reentrant.Lease, error) {
	return c.acquire(ctx, name, l.TryLock)
}

// Lock calls l.Lock(ctx, name) and records an [Acquire] as [Client.TryLock]
// does. Lock gives up only with the context's error, which cannot tell a
// wait that ended from an attempt in flight, so that is an unknown outcome.
func (c *Client) Lock(ctx context.Context, l *reentrant.Client, name string) (*reentrant.Lease, error) {
	return c.acquire(ctx, name, l.Lock)
}

func (c *Client) acquire(ctx context.Context, name string, lock func(context.Context, string, ...reentrant.CallOption) (*reentrant.Lease, error)) (*reentrant.Lease, error) {
	var lease *reentrant.Lease
	var lerr error
	call := c.r.now()
	err := c.Do(Acquire{Name: name, Owner: owner(ctx)}, func() (any, error) {
		lease, lerr = lock(ctx, name)
		switch {
		case lerr == nil:
			return AcquireResult{Acquired: true, Token: lease.Token(), Depth: lease.Depth()}, nil
		case errors.Is(lerr, reentrant.ErrNotAcquired) && !ended(lerr):
			return AcquireResult{}, nil
		}
		return nil, lerr
	})
	if err != nil {
		// The client undoes an acquire whose outcome it could not learn,
		// within this very call: others may have seen the lock held by
		// it, then free again, with no release in the history.
		c.r.unknownSince(Abandon{Name: name, Owner: owner(ctx)}, call)
		return nil, err
	}
	return lease, lerr
}

// Unlock calls lease.Unlock(ctx) and records a [Release] of the lease's
// ownership, with depth [AnyDepth] because Unlock does not report it. nil
// is a release done: by this call, or by an earlier attempt of it (the
// name free with no token issued since, which the model accepts only
// then). ErrNotHeld is a definite refusal (never Unlock a lease twice: the
// second refusal is the lease's memory, not the server's), but for two:
// the one joined with the lease's loss (ErrLost) while Redis still held
// the lock, when Unlock released it there, a release done; and the one
// saying the release is unconfirmed (the ownership no longer holds the
// lock and someone took it since: an earlier attempt of this Unlock may
// have released it, or not), an unknown outcome. Every other error is an
// unknown outcome. It returns Unlock's error.
func (c *Client) Unlock(ctx context.Context, lease *reentrant.Lease) error {
	in := Release{Name: lease.Name(), Owner: string(lease.Owner()), Token: lease.Token()}
	var uerr error
	err := c.Do(in, func() (any, error) {
		uerr = lease.Unlock(ctx)
		switch {
		case uerr == nil, errors.Is(uerr, reentrant.ErrLost) && !strings.Contains(uerr.Error(), "Redis no longer held it"):
			return ReleaseResult{Released: true, Depth: AnyDepth}, nil
		case Unconfirmed(uerr):
			return nil, uerr
		case errors.Is(uerr, reentrant.ErrNotHeld):
			return ReleaseResult{}, nil
		}
		return nil, uerr
	})
	if err != nil {
		return err
	}
	return uerr
}

// Unconfirmed reports whether err is Unlock's ErrNotHeld saying the release
// is unconfirmed: the lock is no longer the lease's, and a token was issued
// since, so Unlock cannot tell whether an earlier attempt of it released
// the lock. It is never ErrLost.
func Unconfirmed(err error) bool {
	return errors.Is(err, reentrant.ErrNotHeld) && !errors.Is(err, reentrant.ErrLost) &&
		strings.Contains(err.Error(), "release unconfirmed")
}

// Put calls s.Put and records a [Put]. An error wrapping fence.ErrStale is
// a definite refusal, every other error an unknown outcome. A store client
// that retries a write on its own can answer ErrStale to the retry of a
// write its first attempt applied; the check then reports it.
func (c *Client) Put(ctx context.Context, s storage.Store, key, value string, token fence.Token) error {
	return c.decided(Put{Key: key, Token: token, Value: value}, func() error {
		return s.Put(ctx, key, []byte(value), token)
	}, WriteResult{Accepted: true}, WriteResult{}, fence.ErrStale)
}

// Delete calls s.Delete and records a [Delete]; errors are sorted as by
// [Client.Put].
func (c *Client) Delete(ctx context.Context, s storage.Store, key string, token fence.Token) error {
	return c.decided(Delete{Key: key, Token: token}, func() error { return s.Delete(ctx, key, token) },
		WriteResult{Accepted: true}, WriteResult{}, fence.ErrStale)
}

// decided runs fn under Do and records in with the output done when fn
// succeeds, refused when fn fails with an error wrapping definite (a
// definite refusal), and an unknown outcome for any other error. It returns
// fn's error.
func (c *Client) decided(in any, fn func() error, done, refused any, definite error) error {
	var ferr error
	err := c.Do(in, func() (any, error) {
		ferr = fn()
		switch {
		case ferr == nil:
			return done, nil
		case errors.Is(ferr, definite):
			return refused, nil
		}
		return nil, ferr
	})
	if err != nil {
		return err
	}
	return ferr
}

// Get calls s.Get and records a [Get]; ErrNotFound is an answer.
func (c *Client) Get(ctx context.Context, s storage.Store, key string) (storage.Record, error) {
	var rec storage.Record
	var gerr error
	err := c.Do(Get{Key: key}, func() (any, error) {
		rec, gerr = s.Get(ctx, key)
		switch {
		case gerr == nil:
			return GetResult{Found: true, Value: string(rec.Value), Token: rec.Token}, nil
		case errors.Is(gerr, storage.ErrNotFound):
			return GetResult{}, nil
		}
		return nil, gerr
	})
	if err != nil {
		return rec, err
	}
	return rec, gerr
}

// HighestToken calls s.Highest and records a [Highest].
func (c *Client) HighestToken(ctx context.Context, s storage.Store, key string) (fence.Token, error) {
	var t fence.Token
	err := c.Do(Highest{Key: key}, func() (any, error) {
		var err error
		t, err = s.Highest(ctx, key)
		return HighestResult{Token: t}, err
	})
	return t, err
}
