package fence

import "context"

// tokensKey is the context key of the tokens NewContext adds.
type tokensKey struct{}

// NewContext returns a copy of ctx that carries tok for resource (a lock
// name, or whatever names the thing the token fences), beside every token
// ctx carried already; a token ctx carried for the same resource is
// replaced in the copy. Code that sends a request on behalf of a lock
// holder reads them back with FromContext (package fencehttp sends them as
// HTTP headers). A lease's context (package reentrant) carries its lock's
// name and token so: a call made with it hands them on by itself.
// NewContext stores any resource and token as given, the empty resource
// and None included; the code that sends them refuses those (fencehttp:
// ErrNoToken, an invalid resource).
func NewContext(ctx context.Context, resource string, tok Token) context.Context {
	old, _ := ctx.Value(tokensKey{}).(map[string]Token)
	m := make(map[string]Token, len(old)+1)
	for r, t := range old {
		m[r] = t
	}
	m[resource] = tok
	return context.WithValue(ctx, tokensKey{}, m)
}

// FromContext returns the tokens ctx carries, by resource, and whether it
// carries any. The map is the caller's own copy.
func FromContext(ctx context.Context) (map[string]Token, bool) {
	m, _ := ctx.Value(tokensKey{}).(map[string]Token)
	if len(m) == 0 {
		return nil, false
	}
	out := make(map[string]Token, len(m))
	for r, t := range m {
		out[r] = t
	}
	return out, true
}

// TokenFor returns the token ctx carries for resource, or None and false.
// A server that received a request's tokens (fencehttp.Middleware) passes
// this token with its write to a fenced store.
func TokenFor(ctx context.Context, resource string) (Token, bool) {
	m, _ := ctx.Value(tokensKey{}).(map[string]Token)
	t, ok := m[resource]
	return t, ok
}
