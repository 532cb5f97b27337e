package scripts

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
)

// Extend runs extend.lua and reports whether the ownership still held the
// lock and now has ttl left.
func Extend(ctx context.Context, rdb redis.Scripter, k Keys, owner string, token fence.Token, ttl time.Duration) (bool, error) {
	r, err := ExtendWhy(ctx, rdb, k, owner, token, ttl)
	return r.Held, err
}

// ExtendReply is extend.lua's answer: whether the ownership held the lock,
// and, when it did not because a forced unlock ended it, that unlock's
// record (who, when; Token is the ownership's).
type ExtendReply struct {
	Held   bool
	Forced *Forced
}

// ExtendWhy is Extend, and says who ended the ownership when a forced
// unlock did.
func ExtendWhy(ctx context.Context, rdb redis.Scripter, k Keys, owner string, token fence.Token, ttl time.Duration) (ExtendReply, error) {
	v, err := run(ctx, rdb, extendScript, []any{nil, nil, 2, k.arg(lockKey), k.arg(forcedKey), owner, token.String(),
		ttl.Milliseconds()})
	if err != nil {
		return ExtendReply{}, scriptErr(err)
	}
	return parseExtend(v, token)
}

// ExtendReq names one ownership for [ExtendBatch]. One made by
// [NewExtendReq] carries its arguments ready to send: a renewer that keeps
// it for the ownership's life sends every renewal without boxing them
// again.
type ExtendReq struct {
	Keys  Keys
	Owner string
	Token fence.Token
	TTL   time.Duration // the lease from now; whole milliseconds

	argv []any // extend.lua's arguments, or nil: built per send
}

// NewExtendReq returns the request for an ownership, its arguments built.
func NewExtendReq(k Keys, owner string, token fence.Token, ttl time.Duration) ExtendReq {
	r := ExtendReq{Keys: k, Owner: owner, Token: token, TTL: ttl}
	r.argv = r.build()
	return r
}

// Prepared reports whether r was made by [NewExtendReq].
func (r *ExtendReq) Prepared() bool { return r.argv != nil }

func (r *ExtendReq) build() []any {
	return []any{2, r.Keys.Lock, r.Keys.Forced, r.Owner, r.Token.String(), r.TTL.Milliseconds()}
}

// ExtendResult is the outcome of one [ExtendReq]: as [Extend]'s, plus Sent,
// the instant before the pipeline that carried its last attempt was sent.
// Redis started the new TTL no earlier than Sent.
type ExtendResult struct {
	Held   bool
	Forced *Forced // as ExtendReply's
	Err    error
	Sent   time.Time
}

// ExtendBatch runs extend.lua for every request in pipelines on rdb: one
// round trip per Redis node (a Cluster or Ring client splits the pipeline
// by node itself), as FCALL where the server has Functions, else as
// EVALSHA (see pipelined: entries that find the library or the script
// missing are sent again once it is loaded). The i-th result answers
// reqs[i].
func ExtendBatch(ctx context.Context, rdb redis.Cmdable, reqs []ExtendReq) []ExtendResult {
	b := pipelined(ctx, rdb, extendScript, len(reqs), 6, func(dst []any, i int) []any {
		argv := reqs[i].argv
		if argv == nil {
			argv = reqs[i].build()
		}
		return append(dst, argv...)
	})
	out := make([]ExtendResult, len(reqs))
	for i, cmd := range b.cmds {
		v, err := cmd.Result()
		if err == nil && v == nil && b.execs[i] != nil {
			err = b.execs[i] // a command the pipeline never got to
		}
		out[i] = ExtendResult{Err: scriptErr(err), Sent: b.sent[i]}
		if err == nil {
			var r ExtendReply
			r, out[i].Err = parseExtend(v, reqs[i].Token)
			out[i].Held, out[i].Forced = r.Held, r.Forced
		}
	}
	return out
}

// parseExtend decodes an extend reply for the ownership with token tok.
func parseExtend(v any, tok fence.Token) (ExtendReply, error) {
	if a, ok := v.([]any); ok {
		f, err := parseForcedReply("extend", v, a, 0, tok)
		return ExtendReply{Forced: f}, err
	}
	held, err := parseFlag("extend", v)
	return ExtendReply{Held: held}, err
}

// parseForcedReply decodes a reply {code, by, ms} of script (v, whose
// elements are a): the forced unlock that ended the ownership with token
// tok.
func parseForcedReply(script string, v any, a []any, code int64, tok fence.Token) (*Forced, error) {
	if len(a) == 3 && a[0] == code {
		by, ok1 := a[1].(string)
		at, ok2 := a[2].(int64)
		if ok1 && ok2 {
			return &Forced{Token: tok, At: time.UnixMilli(at), By: by}, nil
		}
	}
	return nil, fmt.Errorf("%w: %s returned %#v", ErrReply, script, v)
}

// parseFlag decodes the 0-or-1 reply of script (extend, abandon, qraise):
// anything else is ErrReply, naming the script.
func parseFlag(script string, v any) (bool, error) {
	n, ok := v.(int64)
	if !ok || (n != 0 && n != 1) {
		return false, fmt.Errorf("%w: %s returned %#v", ErrReply, script, v)
	}
	return n == 1, nil
}
