package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/ctxerr"
	"github.com/redfence/redfence/storage"
)

func checkKey(key string) error {
	if err := storage.CheckKey(key); err != nil {
		return fmt.Errorf("sqlstore: %w", err)
	}
	return nil
}

// withCtx keeps the context's error in the chain when the context ended the
// call, with its cause (a lost lease's, say): drivers report that in their
// own words (SQLite "interrupted", a pgx timeout), and callers test with
// errors.Is(err, context.Canceled).
func withCtx(ctx context.Context, err error) error { return ctxerr.With(ctx, err) }

// Get returns key's value and the token that wrote it. It returns an error
// wrapping storage.ErrNotFound if key has no value, storage.ErrInvalid for a
// bad key, or the database or context error, wrapped.
func (s *Store) Get(ctx context.Context, key string) (storage.Record, error) {
	if err := checkKey(key); err != nil {
		return storage.Record{}, err
	}
	var (
		value []byte
		token sql.NullInt64
	)
	err := s.db.QueryRowContext(ctx, s.q.get, []byte(key)).Scan(&value, &token)
	switch {
	case errors.Is(err, sql.ErrNoRows) || (err == nil && !token.Valid):
		return storage.Record{}, fmt.Errorf("sqlstore: get %q: %w", key, storage.ErrNotFound)
	case err != nil:
		return storage.Record{}, fmt.Errorf("sqlstore: get %q: %w", key, withCtx(ctx, err))
	}
	if value == nil {
		value = []byte{} // a found record's value is never nil
	}
	return storage.Record{Value: value, Token: fence.Token(token.Int64)}, nil
}

// Highest returns the highest token accepted for key, or fence.None if no
// write was ever accepted. Errors are as for [Store.Get], less ErrNotFound.
func (s *Store) Highest(ctx context.Context, key string) (fence.Token, error) {
	if err := checkKey(key); err != nil {
		return fence.None, err
	}
	return s.highest(ctx, s.db, key)
}

func (s *Store) highest(ctx context.Context, db DB, key string) (fence.Token, error) {
	var h int64
	err := db.QueryRowContext(ctx, s.q.highest, []byte(key)).Scan(&h)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fence.None, nil
	case err != nil:
		return fence.None, fmt.Errorf("sqlstore: highest %q: %w", key, withCtx(ctx, err))
	}
	return fence.Token(h), nil
}

// Put stores value under key if token is not lower than the highest token
// accepted for key, and raises the highest to token, in one statement.
// A nil value is stored as an empty one. Put returns nil when the write was
// committed; an error wrapping fence.ErrStale (a *fence.StaleError with the
// current highest) or fence.ErrNoToken when the rule refused it and nothing
// changed; storage.ErrInvalid for a bad key or a token above [MaxToken];
// or the database or context error, wrapped, in which case the statement
// was applied whole or not at all.
func (s *Store) Put(ctx context.Context, key string, value []byte, token fence.Token) error {
	if value == nil {
		value = []byte{} // NULL means "no value"; an empty value is a value
	}
	return s.write(ctx, s.db, "put", s.q.put, key, token, []byte(key), value, int64(token))
}

// Delete removes key's value if token is not lower than the highest token
// accepted for key, and keeps token as the highest so older writers stay
// fenced out. Deleting a key with no value is accepted and records token.
// Errors are as for [Store.Put].
func (s *Store) Delete(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, s.db, "delete", s.q.del, key, token, []byte(key), int64(token))
}

// write runs one conditional upsert on db. A row back means accepted; no
// row means the WHERE clause refused it, and the current highest is read
// to report it.
func (s *Store) write(ctx context.Context, db DB, op, query, key string, token fence.Token, args ...any) error {
	if err := checkKey(key); err != nil {
		return err
	}
	switch {
	case token == fence.None:
		return fmt.Errorf("sqlstore: %s %q: %w", op, key, fence.ErrNoToken)
	case token > MaxToken:
		return fmt.Errorf("sqlstore: %s %q: token %d exceeds %d: %w", op, key, token, MaxToken, storage.ErrInvalid)
	}
	if s.d == MySQL {
		if op == "put" {
			args = append(args, int64(token)) // "token" and "highest": ? names one argument each
		}
		h, err := s.writeMySQL(ctx, db, query, key, args...)
		switch {
		case err != nil:
			return fmt.Errorf("sqlstore: %s %q: %w", op, key, err)
		case h == token:
			return nil
		case h < token:
			return fmt.Errorf("sqlstore: %s %q: the fence row of %s reads %d after a write of %d: was it lowered by hand?", op, key, s.table, h, token)
		}
		return fmt.Errorf("sqlstore: %s %q: %w", op, key, &fence.StaleError{Token: token, Highest: h})
	}
	var got int64
	err := db.QueryRowContext(ctx, query, args...).Scan(&got)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlstore: %s %q: %w", op, key, withCtx(ctx, err))
	}
	// Refused. The row exists (the conflict found it, and rows are never
	// deleted) and its highest only grows, so it is still above token.
	h, err := s.highest(ctx, db, key)
	switch {
	case err != nil:
		return fmt.Errorf("sqlstore: %s %q refused as stale, then: %w", op, key, err)
	case h <= token:
		return fmt.Errorf("sqlstore: %s %q refused, but the fence row of %s now reads %d: was it deleted or lowered by hand?", op, key, s.table, h)
	}
	return fmt.Errorf("sqlstore: %s %q: %w", op, key, &fence.StaleError{Token: token, Highest: h})
}
