package fencehttp

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/redfence/redfence/fence"
)

// Transport returns a RoundTripper that sends the tokens of each request's
// context (fence.FromContext: a lease's context carries its lock's) in a
// Fencing-Token header, through base (http.DefaultTransport when nil). A
// request whose context carries no token goes out as it is. The request
// is cloned, never changed; a Fencing-Token header set on it is replaced.
// A request made with a lease's context is cancelled when the lease ends,
// before it is sent; to have the service refuse it instead (and learn the
// highest token), send it with context.WithoutCancel(lease.Context()).
// A token the wire format cannot carry (None, an empty resource, too many)
// fails the request with Format's error, before anything is sent. Like
// every RoundTripper it does not interpret the response: ResponseError
// does.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return transport{base}
}

type transport struct{ base http.RoundTripper }

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	tokens, ok := fence.FromContext(req.Context())
	if !ok {
		return t.base.RoundTrip(req)
	}
	v, err := Format(tokens)
	if err != nil {
		if req.Body != nil {
			_ = req.Body.Close() // a RoundTripper closes the body, even on errors
		}
		return nil, err
	}
	req = req.Clone(req.Context())
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set(Header, v)
	return t.base.RoundTrip(req)
}

// CloseIdleConnections closes the idle connections of the base transport,
// when it has that method (http.Transport does), so that
// http.Client.CloseIdleConnections reaches through the wrapper.
func (t transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// StaleError is a request a service refused for a stale token: 409
// Conflict with a Fencing-Token-Highest header. errors.Is(err,
// fence.ErrStale) holds for it.
type StaleError struct {
	Resource string      // the resource the service names
	Token    fence.Token // the token the request carried for it; None if it carried none
	Highest  fence.Token // the highest token the service had accepted for it
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("fencehttp: resource %q: stale token %d (highest accepted %d)", e.Resource, e.Token, e.Highest)
}

// Is makes errors.Is(err, fence.ErrStale) hold.
func (e *StaleError) Is(target error) bool { return target == fence.ErrStale }

// Unwrap returns the refusal as a *fence.StaleError, so that a service
// that forwards it (WriteError, fencegrpc.Error) answers with both tokens.
func (e *StaleError) Unwrap() error { return &fence.StaleError{Token: e.Token, Highest: e.Highest} }

// ResponseError returns a *StaleError when resp is a stale-token refusal
// (409 with a well-formed Fencing-Token-Highest header), and nil for any
// other response, a 409 without that header included.
func ResponseError(resp *http.Response) error {
	if resp == nil || resp.StatusCode != http.StatusConflict {
		return nil
	}
	v := resp.Header.Get(HighestHeader)
	if v == "" {
		return nil
	}
	enc, tok, ok := strings.Cut(strings.TrimSpace(v), "=")
	if !ok {
		return nil
	}
	r, err := decodeResource(enc)
	if err != nil {
		return nil
	}
	h, err := parseToken(tok)
	if err != nil {
		return nil
	}
	e := &StaleError{Resource: r, Highest: h}
	if resp.Request != nil {
		if sent, err := Parse(resp.Request.Header.Values(Header)); err == nil {
			e.Token = sent[r]
		}
	}
	return e
}
