package testenv

import (
	"context"
	"fmt"
	"regexp"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// holdPattern is a hold kept as a string (lua/lib.lua, "Keys"):
// "<t> <x> <b> <id> <o>".
var holdPattern = regexp.MustCompile(`(?s)^([1-9][0-9]*) ([1-9][0-9]*) ([1-9][0-9]*) ([^ ]+) (.+)$`)

// HoldFields reads v as a hold kept as a string and returns the fields of
// the lock hash it stands for (o, t, x, l:<id> = 1, b), with the scripts'
// own checks (canonical decimals of at most 16 digits, b at most t); false
// when v is not such a hold.
func HoldFields(v string) (map[string]string, bool) {
	m := holdPattern.FindStringSubmatch(v)
	if m == nil || len(m[1]) > 16 || len(m[2]) > 16 || len(m[3]) > 16 {
		return nil, false
	}
	t, _ := strconv.ParseInt(m[1], 10, 64)
	b, _ := strconv.ParseInt(m[3], 10, 64)
	if b > t {
		return nil, false
	}
	return map[string]string{"o": m[5], "t": m[1], "x": m[2], "l:" + m[4]: "1", "b": m[3]}, true
}

// LockFields returns the fields of the lock key: its hash's, or for a hold
// kept as a string the hash's it stands for (HoldFields); an empty map for
// no key. Any other value is an error.
func LockFields(ctx context.Context, rdb redis.Cmdable, key string) (map[string]string, error) {
	kind, err := rdb.Type(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	switch kind {
	case "none":
		return map[string]string{}, nil
	case "string":
		v, err := rdb.Get(ctx, key).Result()
		if err != nil {
			return nil, err
		}
		if f, ok := HoldFields(v); ok {
			return f, nil
		}
		return nil, fmt.Errorf("lock key %q holds the string %q, not a hold", key, v)
	}
	return rdb.HGetAll(ctx, key).Result()
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
