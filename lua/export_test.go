package lua

import "github.com/redfence/redfence/internal/scripts"

// Internal is k in the form the internal scripts package takes, for tests
// of the Redlock scripts, which lua does not wrap.
func (k Keys) Internal() scripts.Keys { return k.internal() }

// Internal is r in the form the internal scripts package takes.
func (r *Request) Internal() *scripts.Request { return r.internal() }
