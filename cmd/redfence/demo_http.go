package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/fence/fencehttp"
	"github.com/redfence/redfence/storage"
)

// demoWriter is how the demo's workers write the resource: to the store
// directly, or through a fenced HTTP service (--http).
type demoWriter interface {
	// put writes value under the lock's token: tok, or, through the
	// service, the token ctx carries for the lock (a lease's context).
	put(ctx context.Context, value string, tok fence.Token) error
	get(ctx context.Context) (storage.Record, error)
	// describe says where the writes go.
	describe() string
}

// storeWriter writes to the store itself.
type storeWriter struct {
	store    storage.Store
	resource string
}

func (s storeWriter) put(ctx context.Context, value string, tok fence.Token) error {
	return s.store.Put(ctx, s.resource, []byte(value), tok)
}

func (s storeWriter) get(ctx context.Context) (storage.Record, error) {
	return s.store.Get(ctx, s.resource)
}

func (s storeWriter) describe() string { return "" }

// httpWriter writes through a fenced HTTP service on loopback: PUT
// /invoices/{name} stores the body under invoices/{name} in the store, with
// the request's token for the lock {name} (fencehttp.Middleware); the
// workers' client sends their lease's token (fencehttp.Transport).
type httpWriter struct {
	url    string // of the resource
	client *http.Client
	store  storage.Store
	key    string
}

// startHTTP starts the service on a free loopback port and returns its
// writer for the lock name, and what stops the service.
func startHTTP(store storage.Store, name, resource string) (*httpWriter, func(), error) {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /invoices/{name}", func(w http.ResponseWriter, r *http.Request) {
		lock := r.PathValue("name")
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tok, _ := fence.TokenFor(r.Context(), lock) // None without one: the store refuses it
		if err := store.Put(r.Context(), "invoices/"+lock, body, tok); err != nil {
			if !fencehttp.WriteError(w, lock, err) {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("http service: %w", err)
	}
	srv := &http.Server{Handler: fencehttp.Middleware(mux, fencehttp.Require()), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	hw := &httpWriter{
		url:    "http://" + lis.Addr().String() + "/invoices/" + url.PathEscape(name),
		client: &http.Client{Transport: fencehttp.Transport(nil), Timeout: 10 * time.Second},
		store:  store,
		key:    resource,
	}
	return hw, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

func (h *httpWriter) put(ctx context.Context, value string, _ fence.Token) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, h.url, strings.NewReader(value))
	if err != nil {
		return err
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err := fencehttp.ResponseError(resp); err != nil {
		return fmt.Errorf("PUT %s: %s: %w", h.url, resp.Status, err)
	}
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("PUT %s: %s: %s", h.url, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// get reads the store behind the service: the demo checks what it holds.
func (h *httpWriter) get(ctx context.Context) (storage.Record, error) { return h.store.Get(ctx, h.key) }

func (h *httpWriter) describe() string {
	return fmt.Sprintf(" through a fenced HTTP service at %s (header %s)", h.url, fencehttp.Header)
}

// isStale reports a write refused for its token, by the store or the
// service.
func isStale(err error) bool { return errors.Is(err, fence.ErrStale) }
