package api

import (
	"context"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate-dev/floodgate/server/decision"
	"github.com/floodgate-dev/floodgate/server/envoy"
	"github.com/floodgate-dev/floodgate/server/internal/rlswire"
	"github.com/floodgate-dev/floodgate/server/internal/tracing"
)

// RLS serves Envoy's rate limit service, envoy.service.ratelimit.v3, from a
// Core. Register it with rls.RegisterRateLimitServiceServer, or, for the
// same answers for less CPU, with the hand-written codec: RegisterWire.
type RLS struct {
	rls.UnimplementedRateLimitServiceServer
	core  Core
	o     Options
	codes map[string]codes.Code // by errorKind: grpcCodes, or envoyGRPCCodes
}

// NewRLS returns the gRPC service of core.
func NewRLS(core Core, o Options) *RLS {
	r := &RLS{core: core, o: o, codes: grpcCodes}
	if o.Envoy {
		r.codes = envoyGRPCCodes
	}
	return r
}

// ShouldRateLimit decides req as envoyproxy/ratelimit does: statuses in
// request order; no matching limit → OK without current_limit; unlimited → OK
// with limit_remaining 4294967295; shadow mode → OK. A malformed request is
// InvalidArgument; a store failure in the error failure mode is Unavailable.
func (r *RLS) ShouldRateLimit(ctx context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	start := time.Now()
	in, err := rlswire.FromProto(req)
	out, err := r.answer(ctx, start, in, err)
	if err != nil {
		return nil, err
	}
	p := rlswire.ToProto(out)
	p.DynamicMetadata = r.dynamicMetadata(req, out)
	return p, nil
}

// answer decides in, a request received at start, and counts it in the
// metrics. decodeErr, when not nil, is the error reading the request gave: it
// is answered instead. Errors are gRPC status errors. Both ShouldRateLimit and
// the hand-written codec's handler answer through it.
func (r *RLS) answer(ctx context.Context, start time.Time, in *decision.Request, decodeErr error) (*decision.Response, error) {
	if r.o.Tracer != nil {
		return r.answerTraced(ctx, in, func(ctx context.Context) (*decision.Response, error) {
			return r.answerUntraced(ctx, start, in, decodeErr)
		})
	}
	return r.answerUntraced(ctx, start, in, decodeErr)
}

func (r *RLS) answerUntraced(ctx context.Context, start time.Time, in *decision.Request, decodeErr error) (*decision.Response, error) {
	var out *decision.Response
	err := decodeErr
	if err == nil {
		out, err = r.core.Decide(ctx, in)
	}
	kind := errorKind(err)
	if m := r.o.Meter; m != nil {
		code := codeLabel(kind)
		if err == nil {
			code = out.Code.String()
		}
		m.Request("grpc", code, time.Since(start))
	}
	if err != nil {
		return nil, status.Error(r.codes[kind], err.Error())
	}
	return out, nil
}

// answerTraced is answer (decide) under a server span, the child of the
// trace context in the call's metadata.
func (r *RLS) answerTraced(ctx context.Context, in *decision.Request, decide func(context.Context) (*decision.Response, error)) (*decision.Response, error) {
	ctx, span := r.o.Tracer.GRPC(ctx)
	out, err := decide(r.o.Tracer.Request(ctx, in))
	code := status.Code(err).String() // a gRPC status error
	if err == nil {
		code = out.Code.String()
	}
	tracing.End(span, code, err)
	return out, err
}

// RegisterWire registers r on g with the hand-written message types of
// package rlswire, under the names of the generated service
// (rls.RegisterRateLimitServiceServer), so clients see no difference. g
// must read messages with rlswire.Codec (grpc.ForceServerCodecV2).
func RegisterWire(g *grpc.Server, r *RLS) { g.RegisterService(&wireDesc, r) }

// wireDesc is envoy.service.ratelimit.v3.RateLimitService with the
// hand-written message types.
var wireDesc = grpc.ServiceDesc{
	ServiceName: "envoy.service.ratelimit.v3.RateLimitService",
	HandlerType: (*wireServer)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: shouldRateLimitHandler}},
	Streams:     []grpc.StreamDesc{},
	Metadata:    "envoy/service/ratelimit/v3/rls.proto",
}

// wireServer is the server of wireDesc: RLS.
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
		in.KeepRaw = r.o.DynamicMetadata
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
	if m := r.dynamicMetadata(in.Raw, out); m != nil {
		if in.Resp.Metadata, err = (proto.MarshalOptions{Deterministic: true}).Marshal(m); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &in.Resp, nil
}

// dynamicMetadata is envoy.DynamicMetadata under Options.DynamicMetadata,
// else nil.
func (r *RLS) dynamicMetadata(req *rls.RateLimitRequest, out *decision.Response) *structpb.Struct {
	if !r.o.DynamicMetadata {
		return nil
	}
	return envoy.DynamicMetadata(req, out)
}
