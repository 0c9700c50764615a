package server

// The decision server reads Envoy's RateLimitRequest and writes its
// RateLimitResponse by hand (package rlswire): this is its gRPC service
// over those messages. The generated path stays for library users
// (RLS.ShouldRateLimit).

import (
	"context"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-dev/floodgate/server/internal/rlswire"
)

// rlsWireDesc is envoy.service.ratelimit.v3.RateLimitService with the
// hand-written message types: the names of the generated service
// (rls.RegisterRateLimitServiceServer), so clients see no difference. It
// needs rlswire.Codec on the server.
var rlsWireDesc = grpc.ServiceDesc{
	ServiceName: "envoy.service.ratelimit.v3.RateLimitService",
	HandlerType: (*wireServer)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: shouldRateLimitHandler}},
	Streams:     []grpc.StreamDesc{},
	Metadata:    "envoy/service/ratelimit/v3/rls.proto",
}

// wireServer is the server of rlsWireDesc: RLS.
type wireServer interface {
	// shouldRateLimitWire answers a decoded request with a *rlswire.Outgoing,
	// or with nil and a gRPC status error.
	shouldRateLimitWire(ctx context.Context, in *rlswire.Incoming) (any, error)
}

// shouldRateLimitHandler is a grpc.MethodHandler as the generated one is,
// interceptor included, for rlswire.Incoming and rlswire.Outgoing.
func shouldRateLimitHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(rlswire.Incoming)
	if r, ok := srv.(*RLS); ok {
		in.KeepRaw = r.s.envoyDynamicMetadataOn()
	}
	if err := dec(in); err != nil {
		return nil, err
	}
	s := srv.(wireServer)
	if interceptor == nil {
		return s.shouldRateLimitWire(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rls.RateLimitService_ShouldRateLimit_FullMethodName}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return s.shouldRateLimitWire(ctx, req.(*rlswire.Incoming))
	})
}

// shouldRateLimitWire is ShouldRateLimit on hand-decoded messages: the same
// answers, errors and metrics. A request rlswire.Codec could not read is
// InvalidArgument.
func (r *RLS) shouldRateLimitWire(ctx context.Context, in *rlswire.Incoming) (any, error) {
	out, err := r.answer(ctx, time.Now(), &in.Req, in.Err)
	if err != nil {
		return nil, err
	}
	in.Resp = rlswire.Outgoing{Response: out}
	if m := r.s.envoyDynamicMetadata(in.Raw, out); m != nil {
		if in.Resp.Metadata, err = (proto.MarshalOptions{Deterministic: true}).Marshal(m); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &in.Resp, nil
}
