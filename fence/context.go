package fence

import "context"

// tokensKey is the context key of the tokens NewContext adds.
type tokensKey struct{}

// tokenNode is one token NewContext added, and those before it: a chain,
// so that adding one costs one small allocation, not a copy of a map.
type tokenNode struct {
	prev     *tokenNode
	resource string
	tok      Token
}

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
	prev, _ := ctx.Value(tokensKey{}).(*tokenNode)
	return context.WithValue(ctx, tokensKey{}, &tokenNode{prev: prev, resource: resource, tok: tok})
}

// FromContext returns the tokens ctx carries, by resource, and whether it
// carries any. The map is the caller's own.
func FromContext(ctx context.Context) (map[string]Token, bool) {
	n, _ := ctx.Value(tokensKey{}).(*tokenNode)
	if n == nil {
		return nil, false
	}
	out := map[string]Token{}
	for ; n != nil; n = n.prev {
		if _, newer := out[n.resource]; !newer {
			out[n.resource] = n.tok
		}
	}
	return out, true
}

// WithoutTokens returns a copy of ctx that carries no token, whatever ctx
// carried: a server builds a request's tokens on it from the request
// alone (fencehttp.Middleware, fencegrpc's interceptors).
func WithoutTokens(ctx context.Context) context.Context {
	return context.WithValue(ctx, tokensKey{}, (*tokenNode)(nil))
}

// TokenFor returns the token ctx carries for resource, or None and false.
// A server that received a request's tokens (fencehttp.Middleware) passes
// this token with its write to a fenced store.
func TokenFor(ctx context.Context, resource string) (Token, bool) {
	n, _ := ctx.Value(tokensKey{}).(*tokenNode)
	for ; n != nil; n = n.prev {
		if n.resource == resource {
			return n.tok, true
		}
	}
	return None, false
}
