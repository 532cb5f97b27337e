package fencegrpc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/fence/fencegrpc"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/memory"
	"github.com/redfence/redfence/storage/redisstore"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// The test service, written by hand (no generated code): Put writes one
// "key=value" through the store with the call's token for key; PutStream
// writes each message of a client stream so, and ends at the first error.
const (
	putMethod    = "/fencetest.Store/Put"
	streamMethod = "/fencetest.Store/PutStream"
)

type storeServer struct{ store storage.Store }

func (s storeServer) put(ctx context.Context, kv string) error {
	key, value, _ := strings.Cut(kv, "=")
	tok, _ := fence.TokenFor(ctx, key)
	err := s.store.Put(ctx, key, []byte(value), tok)
	if strings.HasPrefix(value, "raw") {
		return err // the store's error as it is: the interceptor maps it
	}
	return fencegrpc.Error(key, err)
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: "fencetest.Store",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Put",
		Handler: func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			req := new(wrapperspb.StringValue)
			if err := dec(req); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return &emptypb.Empty{}, srv.(storeServer).put(ctx, req.(*wrapperspb.StringValue).GetValue())
			}
			if in == nil {
				return h(ctx, req)
			}
			return in(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: putMethod}, h)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "PutStream",
		ClientStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			for {
				m := new(wrapperspb.StringValue)
				err := ss.RecvMsg(m)
				if errors.Is(err, io.EOF) {
					return ss.SendMsg(&emptypb.Empty{})
				}
				if err != nil {
					return err
				}
				if err := srv.(storeServer).put(ss.Context(), m.GetValue()); err != nil {
					return err
				}
			}
		},
	}},
}

// serve starts the service on a loopback listener and returns a client
// connection through the client interceptors.
func serve(t *testing.T, store storage.Store, opts ...fencegrpc.Option) *grpc.ClientConn {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(fencegrpc.UnaryServerInterceptor(opts...)),
		grpc.ChainStreamInterceptor(fencegrpc.StreamServerInterceptor(opts...)))
	srv.RegisterService(&serviceDesc, storeServer{store})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(fencegrpc.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(fencegrpc.StreamClientInterceptor()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func put(ctx context.Context, cc *grpc.ClientConn, kv string) error {
	return cc.Invoke(ctx, putMethod, wrapperspb.String(kv), new(emptypb.Empty))
}

func putStream(ctx context.Context, cc *grpc.ClientConn, kvs ...string) error {
	s, err := cc.NewStream(ctx, &serviceDesc.Streams[0], streamMethod)
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		if err := s.SendMsg(wrapperspb.String(kv)); err != nil {
			break // the server ended the stream: RecvMsg says why
		}
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	return s.RecvMsg(new(emptypb.Empty))
}

// Kleppmann's scenario through gRPC, unary and streaming, on the memory
// and Redis stores with locks on the real Redis: the paused holder's late
// call is refused with codes.FailedPrecondition and the newer token, and
// the store keeps the newer holder's value.
func TestPausedHolderRefusedThroughGRPC(t *testing.T) {
	stores := map[string]func(t *testing.T) storage.Store{
		"memory": func(*testing.T) storage.Store { return memory.New() },
		"redis": func(t *testing.T) storage.Store {
			s, err := redisstore.New(testenv.Redis(t), redisstore.WithPrefix(testenv.Unique(t)))
			require.NoError(t, err)
			return s
		},
	}
	calls := map[string]func(ctx context.Context, cc *grpc.ClientConn, kv string) error{
		"unary":  put,
		"stream": func(ctx context.Context, cc *grpc.ClientConn, kv string) error { return putStream(ctx, cc, kv, kv) },
	}
	for sname, newStore := range stores {
		for cname, call := range calls {
			t.Run(sname+"/"+cname, func(t *testing.T) {
				store := newStore(t)
				cc := serve(t, store, fencegrpc.Require())
				locks, err := reentrant.New(testenv.Redis(t), reentrant.WithPrefix(testenv.Unique(t)))
				require.NoError(t, err)
				t.Cleanup(func() { _ = locks.Close() })
				ctx := t.Context()

				a, err := locks.Lock(ctx, "acct", reentrant.WithTTL(300*time.Millisecond), reentrant.WithoutRenewal())
				require.NoError(t, err)
				require.NoError(t, call(a.Context(), cc, "acct=a"))
				late := context.WithoutCancel(a.Context()) // a call on its way when the holder paused
				<-a.Context().Done()
				b, err := locks.Lock(ctx, "acct")
				require.NoError(t, err)
				require.NoError(t, call(b.Context(), cc, "acct=b"))

				err = call(late, cc, "acct=a late")
				require.ErrorIs(t, err, fence.ErrStale)
				var stale *fencegrpc.StaleError
				require.ErrorAs(t, err, &stale)
				require.Equal(t, "acct", stale.Resource)
				require.Equal(t, a.Token(), stale.Token)
				require.Equal(t, b.Token(), stale.Highest)
				require.Equal(t, codes.FailedPrecondition, status.Code(err))

				rec, err := store.Get(ctx, "acct")
				require.NoError(t, err)
				require.Equal(t, "b", string(rec.Value))
				require.Equal(t, b.Token(), rec.Token)
			})
		}
	}
}

// The codes of every case: missing, malformed, stale, equal (accepted),
// several tokens in one call.
func TestCodes(t *testing.T) {
	cc := serve(t, memory.New(), fencegrpc.Require())
	ctx := context.Background()
	with := func(r string, tok fence.Token) context.Context { return fence.NewContext(ctx, r, tok) }

	err := put(ctx, cc, "k=none")
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "missing: %v", err)
	require.NotErrorIs(t, err, fence.ErrStale)
	for _, v := range []string{"k", "k=0", "k=01", "k=1,k=2", "%zz=1"} {
		err := put(metadata.AppendToOutgoingContext(ctx, fencegrpc.MetadataKey, v), cc, "k=bad")
		require.Equal(t, codes.InvalidArgument, status.Code(err), "malformed %q: %v", v, err)
	}
	require.NoError(t, put(with("k", 5), cc, "k=five"))
	require.NoError(t, put(with("k", 5), cc, "k=five again"), "equal is accepted")
	err = put(with("k", 4), cc, "k=four")
	var stale *fencegrpc.StaleError
	require.ErrorAs(t, err, &stale)
	require.Equal(t, fence.Token(5), stale.Highest)
	require.NoError(t, put(fence.NewContext(with("other", 1), "k", 6), cc, "k=six"), "several tokens: the handler uses its own")
	err = put(fence.NewContext(with("k", 6), "other", 9), cc, "other=x")
	require.NoError(t, err)
	err = put(fence.NewContext(with("k", 3), "other", 9), cc, "k=three")
	require.ErrorAs(t, err, &stale)
	require.Equal(t, fencegrpc.StaleError{Resource: "k", Token: 3, Highest: 6}, fencegrpc.StaleError{Resource: stale.Resource, Token: stale.Token, Highest: stale.Highest})

	// A handler that returns the store's error as it is: the interceptor
	// maps it, naming the resource whose token was refused.
	err = put(fence.NewContext(with("k", 3), "other", 9), cc, "k=raw three")
	require.ErrorAs(t, err, &stale)
	require.Equal(t, "k", stale.Resource)
	require.Equal(t, fence.Token(6), stale.Highest)
	err = putStream(with("other", 9), cc, "k=raw none")
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "the None token: %v", err)
	require.NotErrorIs(t, err, fence.ErrStale)

	err = put(with("k", fence.None), cc, "k=zero")
	require.Equal(t, codes.InvalidArgument, status.Code(err), "the client refuses a None token before sending")
	require.Panics(t, func() { fencegrpc.Require("") })
}
