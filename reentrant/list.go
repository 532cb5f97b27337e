package reentrant

// List: a walk over the held locks under a client's prefix.

import (
	"context"
	"errors"
	"iter"
	"slices"
	"sync"
)

// listParallel is how many locks a walk inspects at once.
const listParallel = 16

// List walks the locks held under the client's prefix and yields each one's
// State, read by Inspect: name, holder, depth, token, lease left, waiters.
// The lock hashes are found with SCAN (never KEYS): on a standalone server
// or a Sentinel master, on every primary of a Cluster (and every shard of a
// Ring), and with [NewRedlock] on every node, where a lock is listed when a
// majority of nodes agree on its holder.
//
// It is a walk, not a snapshot. Each lock's state is read in one atomic
// step of its own, at its own moment, so two locks may be seen at different
// times; a lock taken or released during the walk may or may not be
// listed. A lock held from the walk's first command to its last is listed,
// except on a Cluster whose slot moved meanwhile, or with NewRedlock when
// its majority's nodes cannot all be scanned. No name is listed twice. The
// order is no order: SCAN's, each page sorted by name.
//
// An error ends the walk with one last pair (State{}, err), except an
// error that concerns one name (ErrForeign for a key of other data under
// the prefix, a failed read of that lock), which is yielded with
// State{Name: name} and the walk goes on if the loop does: the caller
// decides by breaking. Errors are *OpError with Op "list": ErrInvalid for
// a nil ctx or a Client not made by New or NewRedlock, ErrClosed after
// Close, the context's error when ctx ends (the walk stops then), and
// Redis errors, wrapped. With NewRedlock a node that fails the walk is
// passed over while a majority can be scanned. The memory a walk keeps
// grows with the number of locks it listed (and names it reported), not
// with the keys it found.
func (c *Client) List(ctx context.Context) iter.Seq2[State, error] {
	return func(yield func(State, error) bool) {
		var err error
		switch {
		case c.valid() != nil:
			err = c.valid()
		case ctx == nil:
			err = invalid("nil context")
		case c.isClosed():
			err = ErrClosed
		}
		if err != nil {
			yield(State{}, opErr("list", "", err))
			return
		}
		// Names listed, or reported with an error, are read once: SCAN
		// may return a key twice, and a Redlock's nodes each have it.
		done := map[string]struct{}{}
		stopped := false // by the loop: nothing more is yielded
		err = c.be.scan(ctx, func(names []string) bool {
			slices.Sort(names)
			names = slices.DeleteFunc(slices.Compact(names), func(n string) bool { _, ok := done[n]; return ok })
			for i, r := range c.inspectAll(ctx, names) {
				if ctx.Err() != nil || errors.Is(r.err, ErrClosed) {
					return false // the walk's end says why
				}
				if r.err != nil {
					done[names[i]] = struct{}{}
					if stopped = !yield(State{Name: names[i]}, opErr("list", names[i], r.err)); stopped {
						return false
					}
					continue
				}
				if !r.v.Held {
					continue // free now; a later page may find it held
				}
				done[names[i]] = struct{}{}
				r.v.Meta = shownMeta(r.v.Meta)
				if stopped = !yield(r.v, nil); stopped {
					return false
				}
			}
			return true
		})
		switch {
		case stopped:
			return
		case err == nil && ctx.Err() != nil:
			err = ctx.Err()
		case err == nil && c.isClosed():
			err = ErrClosed
		}
		if err != nil {
			yield(State{}, opErr("list", "", err))
		}
	}
}

// inspectAll inspects names, listParallel at once, and returns their
// states in the order of names.
func (c *Client) inspectAll(ctx context.Context, names []string) []result[State] {
	out := make([]result[State], len(names))
	sem := make(chan struct{}, listParallel)
	var wg sync.WaitGroup
	for i, name := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			st, err := c.inspect(ctx, name)
			out[i] = result[State]{st, err}
		})
	}
	wg.Wait()
	return out
}
