package fencehttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/fence/fencehttp"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
)

// service is a fenced HTTP service: PUT /data/{key} writes the body under
// key through store with the request's token for the resource key; GET
// reads it.
func service(store storage.Store, opts ...fencehttp.Option) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /data/{key}", func(w http.ResponseWriter, r *http.Request) {
		key := r.PathValue("key")
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tok, _ := fence.TokenFor(r.Context(), key)
		if err := store.Put(r.Context(), key, body, tok); err != nil {
			if !fencehttp.WriteError(w, key, err) {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /data/{key}", func(w http.ResponseWriter, r *http.Request) {
		rec, err := store.Get(r.Context(), r.PathValue("key"))
		if errors.Is(err, storage.ErrNotFound) {
			http.NotFound(w, r)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Fencing-Token-Written", rec.Token.String())
		_, _ = w.Write(rec.Value)
	})
	return fencehttp.Middleware(mux, opts...)
}

// put sends PUT /data/key with body, and the raw header when given
// (otherwise the Transport sends ctx's tokens).
func put(t *testing.T, ctx context.Context, url, key, body string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url+"/data/"+key, strings.NewReader(body))
	if err == nil {
		for _, h := range header {
			req.Header.Add(fencehttp.Header, h)
		}
		var resp *http.Response
		if resp, err = (&http.Client{Transport: fencehttp.Transport(nil)}).Do(req); err == nil {
			t.Cleanup(func() { _ = resp.Body.Close() })
			return resp
		}
	}
	t.Error(err) // not FailNow: put runs on the workers' goroutines too
	return &http.Response{StatusCode: -1, Body: http.NoBody, Header: http.Header{}}
}

func bodyOf(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Error(err)
	}
	return string(b)
}

// The status of every case the wire format names.
func TestStatusMapping(t *testing.T) {
	srv := httptest.NewServer(service(memory.New(), fencehttp.Require()))
	defer srv.Close()
	ctx := context.Background()
	with := func(res string, tok fence.Token) context.Context { return fence.NewContext(ctx, res, tok) }

	resp := put(t, ctx, srv.URL, "k", "none")
	require.Equal(t, http.StatusPreconditionRequired, resp.StatusCode, "missing")
	require.Equal(t, 1, strings.Count(bodyOf(t, resp), "\n"), "a one-line body")

	for _, h := range []string{"k", "k=0", "k=-1", "k=1,k=2", "k%zz=1", "k=99999999999999999999"} {
		resp := put(t, ctx, srv.URL, "k", "bad", h)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "malformed %q", h)
		b := bodyOf(t, resp)
		require.Equal(t, 1, strings.Count(b, "\n"), "a one-line body: %q", b)
		require.Contains(t, b, "malformed")
	}

	require.Equal(t, http.StatusNoContent, put(t, with("k", 5), srv.URL, "k", "five").StatusCode)
	require.Equal(t, http.StatusNoContent, put(t, with("k", 5), srv.URL, "k", "five again").StatusCode, "equal is accepted")
	resp = put(t, with("k", 4), srv.URL, "k", "four")
	require.Equal(t, http.StatusConflict, resp.StatusCode, "stale")
	require.Equal(t, "k=5", resp.Header.Get(fencehttp.HighestHeader))
	var stale *fencehttp.StaleError
	require.ErrorAs(t, fencehttp.ResponseError(resp), &stale)
	require.ErrorIs(t, stale, fence.ErrStale)
	require.Equal(t, fencehttp.StaleError{Resource: "k", Token: 4, Highest: 5}, *stale)
	require.NoError(t, fencehttp.ResponseError(put(t, with("k", 6), srv.URL, "k", "six")))

	// Several resources in one request: the handler uses its own.
	both := fence.NewContext(with("other", 1), "k", 7)
	require.Equal(t, http.StatusNoContent, put(t, both, srv.URL, "k", "seven").StatusCode)
	resp = put(t, fence.NewContext(with("k", 3), "other", 100), srv.URL, "k", "three")
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Equal(t, "k=7", resp.Header.Get(fencehttp.HighestHeader))

	// A resource with characters the header escapes.
	name := "orders 42, é=%"
	resp = put(t, with(name, 2), srv.URL, strings.ReplaceAll(name, "%", "%25"), "x")
	require.Equal(t, http.StatusNoContent, resp.StatusCode, bodyOf(t, resp))
	resp = put(t, with(name, 1), srv.URL, strings.ReplaceAll(name, "%", "%25"), "y")
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.ErrorAs(t, fencehttp.ResponseError(resp), &stale)
	require.Equal(t, fencehttp.StaleError{Resource: name, Token: 1, Highest: 2}, *stale)

	// A token the transport cannot send fails the request before it goes.
	req, err := http.NewRequestWithContext(with("k", fence.None), http.MethodPut, srv.URL+"/data/k", nil)
	require.NoError(t, err)
	_, err = (&http.Client{Transport: fencehttp.Transport(nil)}).Do(req)
	require.ErrorIs(t, err, fence.ErrNoToken)
}

// Require names resources; Accept limits what reaches the handler; without
// Require a request without a token reaches the handler, whose store
// refuses the None token: 428 from WriteError.
func TestRequireAndAccept(t *testing.T) {
	ctx := context.Background()
	named := httptest.NewServer(service(memory.New(), fencehttp.Require("k")))
	defer named.Close()
	resp := put(t, fence.NewContext(ctx, "other", 1), named.URL, "k", "x")
	require.Equal(t, http.StatusPreconditionRequired, resp.StatusCode)
	require.Contains(t, bodyOf(t, resp), `"k"`)
	require.Equal(t, http.StatusNoContent, put(t, fence.NewContext(ctx, "k", 1), named.URL, "k", "x").StatusCode)

	optional := httptest.NewServer(service(memory.New(), fencehttp.Accept("j")))
	defer optional.Close()
	resp = put(t, ctx, optional.URL, "k", "x")
	require.Equal(t, http.StatusPreconditionRequired, resp.StatusCode, "the store refused the None token")
	resp = put(t, fence.NewContext(ctx, "k", 1), optional.URL, "k", "x")
	require.Equal(t, http.StatusPreconditionRequired, resp.StatusCode, "k is not accepted on this route: its token is ignored")
	require.Panics(t, func() { fencehttp.Require("") })
	require.Panics(t, func() { fencehttp.Accept("") })
}

// Only the request's own tokens count: a token the server's context
// carried (a BaseContext, an outer handler) does not satisfy Require;
// Accept() with no resource accepts only the required ones.
func TestMiddlewareUsesOnlyTheRequestsTokens(t *testing.T) {
	h := fencehttp.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ := fence.FromContext(r.Context())
		_, _ = fmt.Fprint(w, len(got))
	}), fencehttp.Require("x"), fencehttp.Accept())
	req := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(fence.NewContext(context.Background(), "x", 5))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusPreconditionRequired, rec.Code, "the context's own token is not the request's")

	req = httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set(fencehttp.Header, "x=1, y=2")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "1", rec.Body.String(), "Accept() takes only the required x")
}

// A refusal read from another service, answered again by this one, keeps
// both tokens; a request built without a header map is sent, not a panic.
func TestForwardedRefusalAndBareRequest(t *testing.T) {
	rec := httptest.NewRecorder()
	fromDownstream := &fencehttp.StaleError{Resource: "k", Token: 3, Highest: 9}
	require.True(t, fencehttp.WriteError(rec, "k", fmt.Errorf("calling inventory: %w", fromDownstream)))
	require.Equal(t, http.StatusConflict, rec.Code)
	require.Equal(t, "k=9", rec.Header().Get(fencehttp.HighestHeader))

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprint(w, r.Header.Get(fencehttp.Header))
	}))
	defer srv.Close()
	req, err := http.NewRequestWithContext(fence.NewContext(context.Background(), "k", 4), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header = nil
	resp, err := fencehttp.Transport(nil).RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "k=4", bodyOf(t, resp))
	require.Nil(t, req.Header, "the caller's request is not changed")
}
