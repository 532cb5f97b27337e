package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/ctxerr"
	"github.com/redfence/redfence/storage"
)

// Get returns key's value and the token that wrote it. It returns an error
// wrapping storage.ErrNotFound if key has no value, storage.ErrInvalid for a
// bad key, [ErrForeign] if the Redis key holds something else, or the
// Redis or context error, wrapped.
func (s *Store) Get(ctx context.Context, key string) (storage.Record, error) {
	r, err := s.read(ctx, key, "value")
	if err != nil {
		return storage.Record{}, err
	}
	if r.status == 0 {
		return storage.Record{}, fmt.Errorf("redisstore: get %q: %w", key, storage.ErrNotFound)
	}
	t, err := token(r.fields[1])
	if err != nil {
		return storage.Record{}, err
	}
	return storage.Record{Value: []byte(r.fields[2]), Token: t}, nil
}

// Highest returns the highest token accepted for key, or fence.None if no
// write was ever accepted. Errors are as for [Store.Get], less ErrNotFound.
func (s *Store) Highest(ctx context.Context, key string) (fence.Token, error) {
	r, err := s.read(ctx, key, "highest")
	if err != nil {
		return fence.None, err
	}
	return token(r.fields[0])
}

// read runs get.lua and checks its reply's shape.
func (s *Store) read(ctx context.Context, key, mode string) (reply, error) {
	rk, err := s.Key(key)
	if err != nil {
		return reply{}, err
	}
	v, err := getScript.Run(ctx, s.c, []string{rk}, mode).Result()
	if err != nil {
		return reply{}, opErr("get", key, ctxerr.With(ctx, err))
	}
	r, err := decode(v)
	if err != nil {
		return reply{}, err
	}
	if want := map[int64]int{1: 3, 0: 1}[r.status]; want == 0 || len(r.fields) != want {
		return reply{}, fmt.Errorf("redisstore: unexpected get reply %d %q", r.status, r.fields)
	}
	return r, nil
}

// Put stores value under key if token is not lower than the highest token
// accepted for key, and raises the highest to token, in one atomic step.
// A nil value is stored as an empty one. Put returns nil when the write was
// applied; an error wrapping fence.ErrStale (a *fence.StaleError with the
// current highest) or fence.ErrNoToken when the rule refused it and nothing
// changed; storage.ErrInvalid for a bad key; [ErrForeign] if the Redis
// key holds something else; or the Redis or context error, wrapped. After a
// Redis or context error the write may or may not have been applied, never
// half: re-running it with the same token is safe.
func (s *Store) Put(ctx context.Context, key string, value []byte, token fence.Token) error {
	return s.write(ctx, "put", key, token, value)
}

// Delete removes key's value if token is not lower than the highest token
// accepted for key, and keeps token as the highest so older writers stay
// fenced out. Deleting a key with no value is accepted and records token.
// Errors are as for [Store.Put].
func (s *Store) Delete(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, "del", key, token, nil)
}

func (s *Store) write(ctx context.Context, op, key string, t fence.Token, value []byte) error {
	rk, err := s.Key(key)
	if err != nil {
		return err
	}
	if t == fence.None {
		return fmt.Errorf("redisstore: %s %q: %w", op, key, fence.ErrNoToken)
	}
	args := []any{t.String(), op}
	if op == "put" {
		args = append(args, value)
	}
	v, err := writeScript.Run(ctx, s.c, []string{rk}, args...).Result()
	if err != nil {
		return opErr(op, key, ctxerr.With(ctx, err))
	}
	r, err := decode(v)
	if err != nil {
		return err
	}
	if len(r.fields) != 1 {
		return fmt.Errorf("redisstore: unexpected write reply %d %q", r.status, r.fields)
	}
	switch r.status {
	case 1:
		return nil
	case 0:
		h, err := token(r.fields[0])
		if err != nil {
			return err
		}
		return fmt.Errorf("redisstore: %s %q: %w", op, key, &fence.StaleError{Token: t, Highest: h})
	}
	return fmt.Errorf("redisstore: unexpected write reply %d %q", r.status, r.fields)
}

// opErr wraps err, the error of op on key. A script's refusal of a foreign
// value, the error reply "FOREIGN <key> holds <what>", is [ErrForeign],
// as a lock script's is, and keeps the server's reply: errors.As finds the
// redis.Error.
func opErr(op, key string, err error) error {
	if redis.HasErrorPrefix(err, "FOREIGN") {
		return fmt.Errorf("redisstore: %s %q: %w: %w", op, key, ErrForeign, err)
	}
	return fmt.Errorf("redisstore: %s %q: %w", op, key, err)
}
