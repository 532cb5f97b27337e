package scripts

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
)

// Extend runs extend.lua and reports whether the ownership still held the
// lock and now has ttl left. m sets the hash's own expiry (time tokens).
func Extend(ctx context.Context, rdb redis.Scripter, k Keys, owner string, token fence.Token, ttl time.Duration, m Tokens) (bool, error) {
	v, err := run(ctx, rdb, extendScript, []any{nil, nil, 1, k.Lock, owner, token.String(), ttl.Milliseconds(), m.arg()})
	if err != nil {
		return false, scriptErr(err)
	}
	return parseExtend(v)
}

// ExtendReq names one ownership for [ExtendBatch].
type ExtendReq struct {
	Keys  Keys
	Owner string
	Token fence.Token
	TTL   time.Duration // the lease from now; whole milliseconds
}

// ExtendResult is the outcome of one [ExtendReq]: as [Extend]'s, plus Sent,
// the instant before the pipeline that carried its last attempt was sent.
// Redis started the new TTL no earlier than Sent.
type ExtendResult struct {
	Held bool
	Err  error
	Sent time.Time
}

// ExtendBatch runs extend.lua for every request in one go-redis pipeline on
// rdb: one round trip per Redis node (a Cluster or Ring client splits the
// pipeline by node itself). Entries answered NOSCRIPT (after SCRIPT FLUSH or
// a restart) are sent again with EVAL in a second pipeline, which also
// loads the script for the next batch. The i-th result answers reqs[i].
func ExtendBatch(ctx context.Context, rdb redis.Cmdable, reqs []ExtendReq, m Tokens) []ExtendResult {
	out := make([]ExtendResult, len(reqs))
	idx := make([]int, len(reqs))
	for i := range idx {
		idx[i] = i
	}
	run := func(idx []int, eval func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd) []int {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(idx))
		for j, i := range idx {
			r := reqs[i]
			cmds[j] = eval(ctx, pipe, []string{r.Keys.Lock}, r.Owner, r.Token.String(), r.TTL.Milliseconds(), m.arg())
		}
		sent := time.Now()
		_, execErr := pipe.Exec(ctx)
		var noscript []int
		for j, i := range idx {
			v, err := cmds[j].Result()
			if err == nil && v == nil && execErr != nil {
				err = execErr // a command the pipeline never got to
			}
			if redis.HasErrorPrefix(err, "NOSCRIPT") {
				noscript = append(noscript, i)
			}
			out[i] = ExtendResult{Err: scriptErr(err), Sent: sent}
			if err == nil {
				out[i].Held, out[i].Err = parseExtend(v)
			}
		}
		return noscript
	}
	if again := run(idx, extendScript.EvalSha); len(again) > 0 {
		run(again, extendScript.Eval)
	}
	return out
}

// parseExtend decodes an extend reply.
func parseExtend(v any) (bool, error) { return parseFlag("extend", v) }

// parseFlag decodes the 0-or-1 reply of script (extend, abandon, qraise):
// anything else is ErrReply, naming the script.
func parseFlag(script string, v any) (bool, error) {
	n, ok := v.(int64)
	if !ok || (n != 0 && n != 1) {
		return false, fmt.Errorf("%w: %s returned %#v", ErrReply, script, v)
	}
	return n == 1, nil
}
