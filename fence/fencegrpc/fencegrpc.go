// Package fencegrpc carries fencing tokens over gRPC, from a lock holder to
// the service that writes for it: the gRPC half of package fencehttp, with
// the same wire format in metadata. It is a module of its own, so that
// users of redfence's core never download gRPC.
//
// A lock holder's client is built with [UnaryClientInterceptor] and
// [StreamClientInterceptor], which send the tokens of each call's context
// (a reentrant lease's context carries its lock's name and token) in the
// metadata key fencing-token. The service is built with
// [UnaryServerInterceptor] and [StreamServerInterceptor], which put the
// received tokens into the call's context; the handler passes the token
// (fence.TokenFor) with its write to a fenced store and returns what the
// store says through [Error]. A stale token comes back to the holder as
// codes.FailedPrecondition, with an errdetails.ErrorInfo (reason
// STALE_FENCING_TOKEN) naming the resource and the highest token, which
// the client interceptors turn into a *StaleError: errors.Is(err,
// fence.ErrStale) holds, and status.FromError still reads the status.
//
// The codes: a malformed fencing-token value is codes.InvalidArgument; a
// missing required token (Require) and a write its store refused for want
// of a token are codes.FailedPrecondition with reason MISSING_FENCING_TOKEN;
// a stale token is codes.FailedPrecondition with reason
// STALE_FENCING_TOKEN. docs/remote.md has the protocol.
package fencegrpc

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/fence/fencehttp"
)

// MetadataKey is the metadata key of a call's tokens; its value is a
// Fencing-Token header's (package fencehttp's wire format), on one value
// or several.
const MetadataKey = "fencing-token"

// The ErrorInfo of a refusal: its domain, and its reasons.
const (
	Domain        = "redfence.fencing"
	ReasonStale   = "STALE_FENCING_TOKEN"
	ReasonMissing = "MISSING_FENCING_TOKEN"
)

// outgoing returns ctx with its tokens in the outgoing metadata, or the
// error of a token the wire format cannot carry.
func outgoing(ctx context.Context) (context.Context, error) {
	tokens, ok := fence.FromContext(ctx)
	if !ok {
		return ctx, nil
	}
	v, err := fencehttp.Format(tokens)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	md.Set(MetadataKey, v)
	return metadata.NewOutgoingContext(ctx, md), nil
}

// UnaryClientInterceptor sends the tokens of each call's context in its
// metadata (replacing any fencing-token the caller set), and turns a
// stale-token refusal into a *StaleError. A token the wire format cannot
// carry (None, an empty resource) fails the call with
// codes.InvalidArgument before anything is sent.
func UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		out, err := outgoing(ctx)
		if err != nil {
			return err
		}
		return staleOf(out, invoker(out, method, req, reply, cc, opts...))
	}
}

// StreamClientInterceptor sends the tokens of each stream's context in its
// metadata, and turns a stale-token refusal, from the stream's RecvMsg
// (or CloseAndRecv), into a *StaleError.
func StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		out, err := outgoing(ctx)
		if err != nil {
			return nil, err
		}
		s, err := streamer(out, desc, cc, method, opts...)
		if err != nil {
			return nil, staleOf(out, err)
		}
		return clientStream{s, out}, nil
	}
}

type clientStream struct {
	grpc.ClientStream
	ctx context.Context
}

func (s clientStream) RecvMsg(m any) error { return staleOf(s.ctx, s.ClientStream.RecvMsg(m)) }

// StaleError is a call a service refused for a stale token. errors.Is(err,
// fence.ErrStale) holds for it, and status.FromError(err) returns the
// service's status.
type StaleError struct {
	Resource string      // the resource the service names
	Token    fence.Token // the token the call carried for it; None if it carried none
	Highest  fence.Token // the highest token the service had accepted for it
	st       *status.Status
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("fencegrpc: resource %q: stale token %d (highest accepted %d)", e.Resource, e.Token, e.Highest)
}

// Is makes errors.Is(err, fence.ErrStale) hold.
func (e *StaleError) Is(target error) bool { return target == fence.ErrStale }

// Unwrap returns the refusal as a *fence.StaleError, so that a service
// that forwards it (Error, fencehttp.WriteError) answers with both tokens.
func (e *StaleError) Unwrap() error { return &fence.StaleError{Token: e.Token, Highest: e.Highest} }

// GRPCStatus returns the service's status, for status.FromError.
func (e *StaleError) GRPCStatus() *status.Status { return e.st }

// staleOf returns err as a *StaleError when it is a stale-token refusal,
// else err.
func staleOf(ctx context.Context, err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return err
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != Domain || info.GetReason() != ReasonStale {
			continue
		}
		r := info.GetMetadata()["resource"]
		h, perr := fence.Parse(info.GetMetadata()["highest"])
		if perr != nil {
			return err
		}
		tok, _ := fence.TokenFor(ctx, r)
		return &StaleError{Resource: r, Token: tok, Highest: h, st: st}
	}
	return err
}

// Option configures the server interceptors: fencehttp's options, with
// the same meaning.
type Option = fencehttp.Option

// Require makes the service refuse, with codes.FailedPrecondition (reason
// MISSING_FENCING_TOKEN), a call without a token for each of resources;
// with no resources, a call without any (accepted) token. An empty
// resource name panics (fencehttp.Require).
func Require(resources ...string) Option { return fencehttp.Require(resources...) }

// Accept limits the tokens put into a call's context to those of
// resources (and those Require names); others are ignored. Accept() with
// no resource accepts only those Require names. An empty resource name
// panics (fencehttp.Accept).
func Accept(resources ...string) Option { return fencehttp.Accept(resources...) }

// incoming returns ctx with the call's tokens in it, as p takes them
// (fencehttp.Policy.Apply), or the status that refuses the call.
func incoming(ctx context.Context, p fencehttp.Policy) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	tokens, err := fencehttp.Parse(md.Get(MetadataKey))
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	ctx, m := p.Apply(ctx, tokens)
	if m != nil {
		return nil, missing(m.Resource)
	}
	return ctx, nil
}

// missing is the status of a call without a token for resource ("": any).
func missing(resource string) error {
	msg := "fencegrpc: missing fencing token (metadata " + MetadataKey + ")"
	if resource != "" {
		msg = fmt.Sprintf("fencegrpc: missing fencing token for resource %q (metadata %s)", resource, MetadataKey)
	}
	st, err := status.New(codes.FailedPrecondition, msg).WithDetails(&errdetails.ErrorInfo{
		Domain: Domain, Reason: ReasonMissing, Metadata: map[string]string{"resource": resource}})
	if err != nil {
		return status.Error(codes.FailedPrecondition, msg)
	}
	return st.Err()
}

// UnaryServerInterceptor puts each call's tokens into its context, and
// refuses a malformed value (codes.InvalidArgument) or a missing required
// token (codes.FailedPrecondition) without calling the handler. It
// compares no token with any store: the handler's store does, in the same
// step as its write. A handler's error that wraps fence.ErrStale or
// fence.ErrNoToken and is not a status already (a store's error returned
// as it is) becomes Error's status, for the resource whose token in the
// call is the one the store refused; a handler that knows the resource
// returns Error(resource, err) itself.
func UnaryServerInterceptor(opts ...Option) grpc.UnaryServerInterceptor {
	p := fencehttp.NewPolicy(opts...)
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := incoming(ctx, p)
		if err != nil {
			return nil, err
		}
		reply, err := handler(ctx, req)
		return reply, refusal(ctx, err)
	}
}

// refusal maps a handler's error that is a fencing refusal and not yet a
// gRPC status (the store's own error, returned as it is) as Error would,
// naming the resource whose token in ctx is the one the store refused
// (unnamed when no token, or several, match).
func refusal(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err // the handler's own status, Error's included
	}
	if !errors.Is(err, fence.ErrStale) && !errors.Is(err, fence.ErrNoToken) {
		return err
	}
	resource := ""
	var stale *fence.StaleError
	if tokens, _ := fence.FromContext(ctx); errors.As(err, &stale) {
		n := 0
		for r, t := range tokens {
			if t == stale.Token {
				resource, n = r, n+1
			}
		}
		if n != 1 {
			resource = ""
		}
	}
	return Error(resource, err)
}

// StreamServerInterceptor is UnaryServerInterceptor for streams: the
// stream's Context carries the tokens.
func StreamServerInterceptor(opts ...Option) grpc.StreamServerInterceptor {
	p := fencehttp.NewPolicy(opts...)
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := incoming(ss.Context(), p)
		if err != nil {
			return err
		}
		return refusal(ctx, handler(srv, serverStream{ss, ctx}))
	}
}

type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s serverStream) Context() context.Context { return s.ctx }

// Error returns what a handler returns for err, the outcome of its write
// to resource: for an error wrapping fence.ErrStale, codes.FailedPrecondition
// with an ErrorInfo (reason STALE_FENCING_TOKEN) naming the resource, the
// token presented and the highest accepted (from a *fence.StaleError, as
// every store of redfence returns); for fence.ErrNoToken,
// codes.FailedPrecondition with reason MISSING_FENCING_TOKEN; any other
// error, nil included, unchanged.
func Error(resource string, err error) error {
	var stale *fence.StaleError
	switch {
	case errors.As(err, &stale):
		msg := fmt.Sprintf("fencegrpc: resource %q: stale token %d, a newer holder's token %d was accepted", resource, stale.Token, stale.Highest)
		st, derr := status.New(codes.FailedPrecondition, msg).WithDetails(&errdetails.ErrorInfo{
			Domain: Domain, Reason: ReasonStale,
			Metadata: map[string]string{"resource": resource, "token": stale.Token.String(), "highest": stale.Highest.String()}})
		if derr != nil {
			return status.Error(codes.FailedPrecondition, msg)
		}
		return st.Err()
	case errors.Is(err, fence.ErrStale):
		return status.Error(codes.FailedPrecondition, fmt.Sprintf("fencegrpc: resource %q: stale token", resource))
	case errors.Is(err, fence.ErrNoToken):
		return missing(resource)
	}
	return err
}
