package fencehttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/redfence/redfence/fence"
)

// Option configures Middleware (and fencegrpc's server interceptors, which
// take the same options).
type Option func(*options)

type options struct {
	required  []string // resources every request must carry a token for
	any       bool     // Require(): at least one token
	accept    []string // with acceptSet, the resources accepted
	acceptSet bool     // Accept was given: only accept (and required) go in
}

// Require makes the route refuse, with 428 Precondition Required, a request
// without a token for each of resources; with no resources, a request
// without any token (of the accepted ones). Without Require tokens are
// optional: a request without one reaches the handler, whose store then
// refuses a write with the None token (fence.ErrNoToken). A resource
// named here is accepted too. An empty resource name panics, when
// Middleware is built.
func Require(resources ...string) Option {
	mustNames("Require", resources)
	return func(o *options) {
		o.required = append(o.required, resources...)
		o.any = o.any || len(resources) == 0
	}
}

// Accept limits the tokens the route puts into the request's context to
// those of resources (and those Require names); a request's tokens for
// other resources are ignored, not refused, since a lock holder's context
// may carry the tokens of every lock it holds. Without Accept every
// resource is accepted; Accept() with no resource accepts only those
// Require names. An empty resource name panics, when Middleware is built.
func Accept(resources ...string) Option {
	mustNames("Accept", resources)
	return func(o *options) { o.accept, o.acceptSet = append(o.accept, resources...), true }
}

func mustNames(opt string, resources []string) {
	for _, r := range resources {
		if r == "" {
			panic("fencehttp: " + opt + ": empty resource name")
		}
	}
}

// Middleware reads the tokens of a request's Fencing-Token header and
// puts them into the request's context (fence.NewContext), where the
// handler reads them (fence.TokenFor) to pass with its writes to a fenced
// store; the store's check, in the same atomic step as the write, is what
// refuses a stale token. The middleware itself compares no token with any
// store: a check here would race with the write (docs/remote.md).
//
// It answers, without calling next, 400 Bad Request with a one-line
// text/plain body for a malformed header (ErrMalformed), and 428
// Precondition Required for a missing required token (Require). The
// handler answers a refused write with WriteError: 409 Conflict.
func Middleware(next http.Handler, opts ...Option) http.Handler {
	p := NewPolicy(opts...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tokens, err := Parse(r.Header.Values(Header))
		if err != nil {
			plain(w, http.StatusBadRequest, err.Error())
			return
		}
		ctx, missing := p.Apply(r.Context(), tokens)
		if missing != nil {
			plain(w, http.StatusPreconditionRequired, missing.Error()+" (header "+Header+")")
			return
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// Policy is what a service takes from a request's tokens, built from
// Options: the resources it accepts and those it requires. Middleware and
// fencegrpc's server interceptors apply one.
type Policy struct{ o options }

// NewPolicy returns the policy of opts. An empty resource name in them
// panics (see Require, Accept).
func NewPolicy(opts ...Option) Policy {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.acceptSet {
		o.accept = append(o.accept, o.required...)
	}
	return Policy{o}
}

// MissingError is a required token a request did not carry.
type MissingError struct {
	Resource string // "" when Require() asked for any token
}

func (e *MissingError) Error() string {
	if e.Resource == "" {
		return "fencehttp: missing fencing token"
	}
	return fmt.Sprintf("fencehttp: missing fencing token for resource %q", e.Resource)
}

// Apply returns ctx carrying the accepted ones of tokens, and only them
// (fence.WithoutTokens first: no token ctx carried before, from a
// BaseContext or an outer handler, may stand in for the request's), or a
// *MissingError for the first required token absent.
func (p Policy) Apply(ctx context.Context, tokens map[string]fence.Token) (context.Context, *MissingError) {
	ctx, n := fence.WithoutTokens(ctx), 0
	for res, tok := range tokens {
		if !p.o.acceptSet || slices.Contains(p.o.accept, res) {
			ctx, n = fence.NewContext(ctx, res, tok), n+1
		}
	}
	for _, res := range p.o.required {
		if _, ok := fence.TokenFor(ctx, res); !ok {
			return nil, &MissingError{Resource: res}
		}
	}
	if p.o.any && n == 0 {
		return nil, &MissingError{}
	}
	return ctx, nil
}

// WriteError answers a request whose write to resource a fenced store
// refused, and reports whether err was such a refusal: for an error
// wrapping fence.ErrStale, 409 Conflict with the highest token the store
// had accepted in Fencing-Token-Highest (when err holds a
// *fence.StaleError, as every store of this module returns); for
// fence.ErrNoToken (the request carried no token for resource), 428
// Precondition Required. The body is one line of text. For any other
// error it writes nothing and returns false.
func WriteError(w http.ResponseWriter, resource string, err error) bool {
	var stale *fence.StaleError
	switch {
	case errors.As(err, &stale):
		w.Header().Set(HighestHeader, encodeResource(resource)+"="+stale.Highest.String())
		plain(w, http.StatusConflict, fmt.Sprintf("fencehttp: resource %q: stale token %d, a newer holder's token %d was accepted", resource, stale.Token, stale.Highest))
	case errors.Is(err, fence.ErrStale):
		plain(w, http.StatusConflict, fmt.Sprintf("fencehttp: resource %q: stale token", resource))
	case errors.Is(err, fence.ErrNoToken):
		plain(w, http.StatusPreconditionRequired, (&MissingError{Resource: resource}).Error()+" (header "+Header+")")
	default:
		return false
	}
	return true
}

// plain writes a one-line text/plain response.
func plain(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = fmt.Fprintln(w, msg)
}
