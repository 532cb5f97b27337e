package sqlstore

import (
	"context"
	"database/sql"
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
// After any error the caller must roll tx back: a refused guard leaves the
// row locked but unchanged, and nothing the caller wrote may commit. Under
// REPEATABLE READ or SERIALIZABLE, PostgreSQL may instead fail the guard
// with a serialization error when another transaction raised the row since
// tx's snapshot; retry the whole transaction then. Guard shares the Store's
// table and rule: a resource guarded here is the same fence as the key of
// that name for [Store.Put], whose value it leaves alone.
//
// Guard returns an error wrapping fence.ErrNoToken for the zero token,
// storage.ErrInvalid for a nil tx, a bad resource or a token above
// [MaxToken], or the database or context error, wrapped.
func (s *Store) Guard(ctx context.Context, tx *sql.Tx, resource string, token fence.Token) error {
	if tx == nil {
		return fmt.Errorf("sqlstore: guard %q: nil transaction: %w", resource, storage.ErrInvalid)
	}
	return s.write(ctx, tx, "guard", s.q.guard, resource, token, []byte(resource), int64(token))
}
