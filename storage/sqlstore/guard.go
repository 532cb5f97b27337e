package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage"
)

// Guard fences the caller's transaction tx with token for resource: it
// raises resource's fence row to token inside tx, or fails with an error
// wrapping fence.ErrStale if a higher token was accepted. Call it before tx
// writes anything, then write your own tables in tx and commit; the row
// stays locked until tx ends, so guards on one resource serialize.
//
// A Guard that returns any error has rolled tx back, so a caller that
// ignores the error cannot commit unfenced writes. It returns
// fence.ErrNoToken for the zero token; storage.ErrInvalid for a nil tx, a
// bad resource or a token above [MaxToken]; database and context errors,
// wrapped. docs/storage.md explains the locking, SQLite's and isolation
// levels' behaviour, and why the rollback is done this way.
func (s *Store) Guard(ctx context.Context, tx *sql.Tx, resource string, token fence.Token) error {
	if tx == nil {
		return fmt.Errorf("sqlstore: guard %q: nil transaction: %w", resource, storage.ErrInvalid)
	}
	err := s.write(ctx, tx, "guard", s.q.guard, resource, token, []byte(resource), int64(token))
	if err == nil {
		return nil
	}
	// Ending tx here, rather than asking the caller to, is what makes a
	// refusal final: a caller that logs the error and commits anyway would
	// otherwise commit its writes without a fence. It must go through
	// tx.Rollback, not a ROLLBACK statement: database/sql would not know
	// the transaction had ended, and in SQLite every later statement in tx
	// would then run and commit on its own, outside any transaction.
	if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
		return fmt.Errorf("%w; and its rollback failed: %w", err, rerr)
	}
	return err
}
