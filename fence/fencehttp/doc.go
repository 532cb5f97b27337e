// Package fencehttp carries fencing tokens over HTTP, from a lock holder
// to the service that writes for it, using only the standard library.
//
// A lock holder's requests go through [Transport], which sends the tokens
// of the request's context (a reentrant lease's context carries its lock's
// name and token). The service wraps its handlers in [Middleware], which
// puts the received tokens into the request's context; the handler passes
// the token (fence.TokenFor) with its write to a fenced store, and answers
// a refusal with [WriteError]. The holder reads a refusal back with
// [ResponseError]. A paused holder's late request then fails: sent with
// the lease's context, before it leaves (the context ended with the
// lease); sent with context.WithoutCancel(lease.Context()), which keeps the
// tokens, at the service's store, with 409 Conflict (docs/remote.md says
// which to choose). Wrap the routes that write in Middleware; reads need
// no token, and Require refuses a request without one.
//
// # Wire format
//
// A request carries its tokens in the header Fencing-Token, as a
// comma-separated list of resource=token elements, on one header line or
// several (HTTP's list syntax: spaces and tabs around elements, and empty
// elements, are ignored):
//
//	Fencing-Token: orders%2042=1795815740454287, invoices/7=1795815740455254
//
// The rules:
//
//   - resource is the resource's name (a lock name) as bytes, each byte
//     outside A-Z a-z 0-9 - . _ ~ : / @ written %XX (two hex digits, either
//     case; senders use upper case). Not empty; at most 1024 bytes decoded.
//   - token is the token in decimal, 1 to 18446744073709551615, without a
//     sign or leading zeros. Zero is no token and is malformed.
//   - A resource appears once per request; at most 64 tokens per request.
//
// A service answers:
//
//   - 400 Bad Request, with a one-line text/plain body saying what, for a
//     header that breaks the rules above;
//   - 428 Precondition Required when a token its route requires is missing
//     (Require), or when its store refused a write for want of one;
//   - 409 Conflict when its store refused the write because a newer token
//     was accepted for the resource, with the highest accepted token in
//     the response header Fencing-Token-Highest: resource=token (encoded
//     as above).
//
// 409, not 412 Precondition Failed: 412 answers HTTP's own conditional
// headers (If-Match and the like), which caches and clients act on; a
// stale token is a conflict with the resource's current state (a newer
// holder wrote), which the client resolves by taking the lock again, as
// 409 means. An equal token is accepted: one holder writes many times
// under one token.
package fencehttp
