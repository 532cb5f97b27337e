package redisstore

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
)

var (
	//go:embed record.lua
	recordLua string
	//go:embed write.lua
	writeLua string
	//go:embed get.lua
	getLua string

	// writeScript and getScript are created once: a *redis.Script caches
	// the SHA1 so each call is an EVALSHA, falling back to EVAL on NOSCRIPT.
	// Each is record.lua followed by the script's own file, so the helpers
	// that read and check a record exist once.
	writeScript = redis.NewScript(recordLua + writeLua)
	getScript   = redis.NewScript(recordLua + getLua)
)

// reply is a decoded script reply: its status (1 or 0) and its fields.
type reply struct {
	status int64
	fields []string
}

// decode checks a script reply's shape. A malformed reply means the server
// is not running our script; it is reported, never guessed at.
func decode(v any) (reply, error) {
	a, ok := v.([]any)
	if !ok || len(a) < 2 {
		return reply{}, fmt.Errorf("redisstore: unexpected script reply %v", v)
	}
	st, ok := a[0].(int64)
	if !ok {
		return reply{}, fmt.Errorf("redisstore: unexpected script status %v", a[0])
	}
	r := reply{status: st}
	for _, f := range a[1:] {
		s, ok := f.(string)
		if !ok {
			return reply{}, fmt.Errorf("redisstore: unexpected script field %v", f)
		}
		r.fields = append(r.fields, s)
	}
	return r, nil
}

// token parses a token field; "" is None.
func token(s string) (fence.Token, error) {
	if s == "" {
		return fence.None, nil
	}
	t, err := fence.Parse(s)
	if err != nil {
		return fence.None, fmt.Errorf("redisstore: %w", err)
	}
	return t, nil
}
