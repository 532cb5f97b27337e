package reentrant

// List: a walk over the held locks under a client's prefix.

import (
	"cmp"
	"context"
	"errors"
	"iter"
	"slices"
	"sync"
)

// listParallel is how many locks a walk inspects at once.
const listParallel = 16

// List walks the locks held under the client's prefix and yields each one's
// State, read as Inspect reads it; then also each held read-write lock's
// and semaphore's, as [RWMutex.Inspect] and [Semaphore.Inspect] read them
// (their Holders say which: a name's lock, RW lock and semaphore are three
// entries). It finds them with SCAN (never KEYS) on
// every primary (or shard, or Redlock node; with NewRedlock a lock is listed
// when a majority agree on its holder). It is a walk, not a snapshot: each
// State is read atomically at its own moment. A lock held throughout the walk
// is listed (unless a Cluster slot moved, or a Redlock majority could not all
// be scanned), no name twice, in no particular order.
//
// An error ends the walk with one last (State{}, err), except one that
// concerns a single name (ErrForeign, a failed read), yielded with
// State{Name: name}; the walk goes on unless the loop breaks. Errors are
// *OpError with Op "list": ErrInvalid (nil ctx, a Client not made by New or
// NewRedlock), ErrClosed, the context's error, Redis errors. A Redlock node
// that fails is passed over while a majority can be scanned.
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
		done := map[listed]struct{}{}
		stopped := false // by the loop: nothing more is yielded
		err = c.be.scan(ctx, func(names []listed) bool {
			slices.SortFunc(names, func(a, b listed) int { return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.kind, b.kind)) })
			names = slices.DeleteFunc(slices.Compact(names), func(n listed) bool { _, ok := done[n]; return ok })
			for i, r := range c.inspectAll(ctx, names) {
				if ctx.Err() != nil || errors.Is(r.err, ErrClosed) {
					return false // the walk's end says why
				}
				if r.err != nil {
					done[names[i]] = struct{}{}
					if stopped = !yield(State{Name: names[i].name}, opErr("list", names[i].name, r.err)); stopped {
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
func (c *Client) inspectAll(ctx context.Context, names []listed) []result[State] {
	out := make([]result[State], len(names))
	sem := make(chan struct{}, listParallel)
	var wg sync.WaitGroup
	for i, name := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var st State
			var err error
			if name.kind != 0 {
				st, err = c.inspectShared(ctx, name.name, name.kind)
			} else {
				st, err = c.inspect(ctx, name.name)
			}
			out[i] = result[State]{st, err}
		})
	}
	wg.Wait()
	return out
}

// listed is a name a walk found: a lock's (kind 0), or a read-write lock's
// ('w') or a semaphore's ('s').
type listed struct {
	name string
	kind byte
}
