// Package ctxerr puts a context's cause into the errors of calls it ended,
// so that a store's refusal under a lost lease says why the lease was
// lost, not only "context canceled".
package ctxerr

import (
	"context"
	"errors"
	"fmt"
)

// Of returns nil while ctx is live, else ctx.Err() followed by the cause
// ctx was cancelled with (context.Cause), when that is an error of its own:
// "context canceled: lease lost: ...". errors.Is sees both.
func Of(ctx context.Context) error {
	return With(ctx, ctx.Err())
}

// With returns err, with what Of adds when ctx has ended: ctx.Err() when err
// does not already hold it (a driver's own words for an interrupted call),
// and ctx's cause when it has one of its own that err does not hold. A nil
// err stays nil.
func With(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if err == nil || cerr == nil {
		return err
	}
	if !errors.Is(err, cerr) {
		err = fmt.Errorf("%w: %w", err, cerr)
	}
	if cause := context.Cause(ctx); cause != nil && cause != cerr && !errors.Is(err, cause) {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	return err
}
