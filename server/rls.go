package server

import (
	"context"
	"errors"
	"maps"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/server/envoy"
	"github.com/floodgate-dev/floodgate/server/internal/rlswire"
)

// RLS serves Envoy's rate limit service, envoy.service.ratelimit.v3, from a
// Service. Register it with rls.RegisterRateLimitServiceServer; Server
// registers it with a hand-written codec instead (rls_wire.go), which gives
// the same answers for less CPU.
type RLS struct {
	rls.UnimplementedRateLimitServiceServer
	s     *Service
	codes map[string]codes.Code // by errorKind: grpcCodes, or envoyGRPCCodes
}

// NewRLS returns the gRPC service of s.
func NewRLS(s *Service) *RLS {
	r := &RLS{s: s, codes: grpcCodes}
	if s.opts.Envoy.Enabled {
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
	p.DynamicMetadata = r.s.envoyDynamicMetadata(req, out)
	return p, nil
}

// answer decides in, a request received at start, and counts it in the
// metrics. decodeErr, when not nil, is the error reading the request gave: it
// is answered instead. Errors are gRPC status errors. Both ShouldRateLimit and
// the hand-written codec's handler answer through it.
func (r *RLS) answer(ctx context.Context, start time.Time, in *Request, decodeErr error) (*Response, error) {
	if r.s.tracer != nil {
		return r.answerTraced(ctx, in, func(ctx context.Context) (*Response, error) { return r.answerUntraced(ctx, start, in, decodeErr) })
	}
	return r.answerUntraced(ctx, start, in, decodeErr)
}

func (r *RLS) answerUntraced(ctx context.Context, start time.Time, in *Request, decodeErr error) (*Response, error) {
	var out *Response
	err := decodeErr
	if err == nil {
		out, err = r.s.Decide(ctx, in)
	}
	kind := errorKind(err)
	if m := r.s.opts.Metrics; m != nil {
		code := codeLabel(kind)
		if err == nil {
			code = out.Code.String()
		}
		m.request("grpc", code, time.Since(start))
	}
	if err != nil {
		return nil, status.Error(r.codes[kind], err.Error())
	}
	return out, nil
}

// codeLabel is the metrics' code label of an errorKind: the caller's own
// cancellations and deadlines count as error.
func codeLabel(kind string) string {
	switch kind {
	case "canceled", "deadline":
		return "error"
	case "too_large", "body_timeout":
		return "invalid"
	case "envoy":
		return "error"
	}
	return kind
}

// grpcCodes maps an errorKind to a gRPC status code.
var grpcCodes = map[string]codes.Code{
	"invalid":     codes.InvalidArgument,
	"too_large":   codes.ResourceExhausted,
	"unavailable": codes.Unavailable,
	"canceled":    codes.Canceled,
	"deadline":    codes.DeadlineExceeded,
	"error":       codes.Internal,
	"envoy":       codes.Unknown,
}

// envoyGRPCCodes is grpcCodes in envoy compatibility mode:
// envoyproxy/ratelimit returns its service and Redis errors as plain
// errors, which gRPC sends as Unknown.
var envoyGRPCCodes = func() map[string]codes.Code {
	m := maps.Clone(grpcCodes)
	m["unavailable"] = codes.Unknown
	return m
}()

// errorKind sorts an error of a request for the APIs' answers and the
// metrics' code label: invalid (an InputError), too_large (a TooLargeError), unavailable (the store, in
// the error failure mode), canceled and deadline (the caller's context), or
// error.
func errorKind(err error) string {
	var ie *InputError
	var tl *TooLargeError
	var be *bodyError
	var ee *envoy.Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &ee):
		return "envoy"
	case errors.As(err, &tl):
		return "too_large"
	case errors.As(err, &be):
		if be.timeout {
			return "body_timeout"
		}
		return "invalid"
	case errors.As(err, &ie):
		return "invalid"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	return "error"
}
