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
// wrapping fence.ErrStale (a *fence.StaleError) if a higher token has been
// accepted for resource. Call it before tx writes anything, then write your
// own tables in tx and commit: a paused lock holder's transaction is
// refused before it writes.
//
// The fence row stays locked until tx commits or rolls back, so concurrent
// guards on one resource serialize: a second guard waits, then is refused
// if its token is lower than the first's (once the first commits) or
// proceeds (if the first rolls back). In SQLite the whole database is
// locked for writing instead, from BEGIN IMMEDIATE (see [SQLiteDSN]) to the
// end of tx.
//
// A Guard that returns an error has rolled tx back (through [sql.Tx.Rollback],
// so database/sql knows the transaction is over): nothing tx wrote before
// the guard survives, every later statement in tx and tx.Commit fail with
// sql.ErrTxDone, and the connection returns to the pool outside any
// transaction. A caller that ignores the error therefore cannot commit
// unfenced writes; its deferred tx.Rollback returns sql.ErrTxDone, which is
// harmless. This holds for every error, a refused token as well as a bad
// argument, a database or a context error. Rolling back to a savepoint
// cannot revive tx either. If the rollback itself fails, its error is
// joined to Guard's.
//
// Under REPEATABLE READ or SERIALIZABLE, PostgreSQL may fail the guard with
// a serialization error when another transaction raised the row since tx's
// snapshot; retry the whole transaction then. Guard shares the Store's
// table and rule: a resource guarded here is the same fence as the key of
// that name for [Store.Put], whose value it leaves alone.
//
// Guard returns an error wrapping fence.ErrNoToken for the zero token,
// storage.ErrInvalid for a nil tx, a bad resource (see storage.CheckKey) or
// a token above [MaxToken], or the database or context error, wrapped.
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
		return errors.Join(err, fmt.Errorf("sqlstore: guard %q: rollback: %w", resource, rerr))
	}
	return err
}
