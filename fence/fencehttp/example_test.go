package fencehttp_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/fence/fencehttp"
	"github.com/redfence/redfence/storage/memory"
)

// A service that owns the data checks the caller's token where it writes:
// Middleware puts the request's tokens into its context, the handler
// writes with the token for its resource, and a refused write becomes 409.
// The caller's client sends the tokens of its context (a lease's context
// carries its lock's) with Transport, and reads a refusal with
// ResponseError.
func Example() {
	store := memory.New()
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /invoices/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		tok, _ := fence.TokenFor(r.Context(), id) // the lock is named after the invoice
		if err := store.Put(r.Context(), "invoices/"+id, []byte("paid"), tok); err != nil {
			if !fencehttp.WriteError(w, id, err) {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(fencehttp.Middleware(mux, fencehttp.Require()))
	defer srv.Close()

	client := &http.Client{Transport: fencehttp.Transport(nil)}
	put := func(ctx context.Context) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/invoices/42", strings.NewReader("paid"))
		if err != nil {
			log.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status, fencehttp.ResponseError(resp))
	}
	// A lease's Context carries its token; here two by hand, the newer first.
	put(fence.NewContext(context.Background(), "42", 8))
	put(fence.NewContext(context.Background(), "42", 7))
	// Output:
	// 204 No Content <nil>
	// 409 Conflict fencehttp: resource "42": stale token 7 (highest accepted 8)
}
