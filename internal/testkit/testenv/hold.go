package testenv

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// LockFields returns the fields of the lock key, a hold (lua/lib.lua: a
// hash that exists only while the lock is held); an empty map for no key.
// Any other type is an error.
func LockFields(ctx context.Context, rdb redis.Cmdable, key string) (map[string]string, error) {
	kind, err := rdb.Type(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	switch kind {
	case "none":
		return map[string]string{}, nil
	case "hash":
		return rdb.HGetAll(ctx, key).Result()
	}
	return nil, fmt.Errorf("lock key %q holds a %s, not a hold", key, kind)
}

// LockField returns one field of the lock key as LockFields reads it;
// redis.Nil when the key or the field is absent.
func LockField(ctx context.Context, rdb redis.Cmdable, key, field string) (string, error) {
	f, err := LockFields(ctx, rdb, key)
	if err != nil {
		return "", err
	}
	v, ok := f[field]
	if !ok {
		return "", redis.Nil
	}
	return v, nil
}
