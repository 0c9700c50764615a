package server

import (
	"context"
	"errors"
	"math"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-dev/floodgate/server/config"
)

// RLS serves Envoy's rate limit service, envoy.service.ratelimit.v3, from a
// Service. Register it with rls.RegisterRateLimitServiceServer.
type RLS struct {
	rls.UnimplementedRateLimitServiceServer
	s *Service
}

// NewRLS returns the gRPC service of s.
func NewRLS(s *Service) *RLS { return &RLS{s: s} }

// ShouldRateLimit decides req as envoyproxy/ratelimit does: statuses in
// request order; no matching limit → OK without current_limit; unlimited → OK
// with limit_remaining 4294967295; shadow mode → OK. A malformed request is
// InvalidArgument; a store failure in the error failure mode is Unavailable.
func (r *RLS) ShouldRateLimit(ctx context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	start := time.Now()
	out, err := r.decide(ctx, req)
	kind := errorKind(err)
	if m := r.s.opts.Metrics; m != nil {
		code := codeLabel(kind)
		if err == nil {
			code = out.Code.String()
		}
		m.request("grpc", code, time.Since(start))
	}
	if err != nil {
		return nil, status.Error(grpcCodes[kind], err.Error())
	}
	return toProto(out), nil
}

func (r *RLS) decide(ctx context.Context, req *rls.RateLimitRequest) (*Response, error) {
	in, err := fromProto(req)
	if err != nil {
		return nil, err
	}
	return r.s.Decide(ctx, in)
}

// codeLabel is the metrics' code label of an errorKind: the caller's own
// cancellations and deadlines count as error.
func codeLabel(kind string) string {
	if kind == "canceled" || kind == "deadline" {
		return "error"
	}
	return kind
}

// grpcCodes maps an errorKind to a gRPC status code.
var grpcCodes = map[string]codes.Code{
	"invalid":     codes.InvalidArgument,
	"unavailable": codes.Unavailable,
	"canceled":    codes.Canceled,
	"deadline":    codes.DeadlineExceeded,
	"error":       codes.Internal,
}

// errorKind sorts an error of a request for the APIs' answers and the
// metrics' code label: invalid (an InputError), unavailable (the store, in
// the error failure mode), canceled and deadline (the caller's context), or
// error.
func errorKind(err error) string {
	var ie *InputError
	switch {
	case err == nil:
		return ""
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

// fromProto converts an Envoy request. The request's hits_addend applies to
// every descriptor without its own; 0 means 1, as in envoyproxy/ratelimit. A
// descriptor's own hits_addend is taken as given, so 0 peeks. Negative hits
// (is_negative_hits) are not supported: such a descriptor peeks.
func fromProto(req *rls.RateLimitRequest) (*Request, error) {
	if req == nil {
		return nil, inputErrorf("request is empty")
	}
	cost := int64(req.GetHitsAddend())
	if cost == 0 {
		cost = 1
	}
	out := &Request{Domain: req.GetDomain(), Descriptors: make([]Descriptor, len(req.GetDescriptors()))}
	for i, d := range req.GetDescriptors() {
		if d == nil {
			return nil, inputErrorf("descriptors[%d] is null", i)
		}
		dd := &out.Descriptors[i]
		dd.Entries = make([]config.Entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			dd.Entries[j] = config.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		dd.Cost = cost
		if h := d.GetHitsAddend(); h != nil {
			if h.GetValue() > math.MaxInt64/2 {
				return nil, inputErrorf("descriptors[%d].hits_addend %d is too large", i, h.GetValue())
			}
			dd.Cost = int64(h.GetValue())
		}
		if d.GetIsNegativeHits() {
			dd.Cost = 0
		}
		if o := d.GetLimit(); o != nil {
			if o.GetUnitMultiplier() != nil && o.GetUnitMultiplier().GetValue() > 1 {
				return nil, inputErrorf("descriptors[%d].limit.unit_multiplier is not supported", i)
			}
			dd.Override = &Override{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: overrideUnit(int32(o.GetUnit()))}
		}
	}
	return out, nil
}

// overrideUnit maps envoy.type.v3.RateLimitUnit (UNKNOWN, SECOND, MINUTE,
// HOUR, DAY, MONTH, YEAR, WEEK) to a config.Unit; the two enums agree.
func overrideUnit(u int32) config.Unit { return config.Unit(u) }

// toProto converts a Response.
func toProto(r *Response) *rls.RateLimitResponse {
	out := &rls.RateLimitResponse{
		OverallCode: rls.RateLimitResponse_Code(r.Code),
		Statuses:    make([]*rls.RateLimitResponse_DescriptorStatus, len(r.Statuses)),
	}
	for i := range r.Statuses {
		st := &r.Statuses[i]
		ps := &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_Code(st.Code)}
		if l := st.Limit; l != nil {
			if l.Unlimited {
				ps.LimitRemaining = math.MaxUint32
			} else {
				ps.CurrentLimit = &rls.RateLimitResponse_RateLimit{
					Name:            l.Name,
					RequestsPerUnit: l.RequestsPerUnit,
					Unit:            rls.RateLimitResponse_RateLimit_Unit(l.Unit),
				}
				ps.LimitRemaining = clampUint32(st.Remaining)
				if st.ResetAfter > 0 {
					ps.DurationUntilReset = durationpb.New(st.ResetAfter)
				}
			}
		}
		out.Statuses[i] = ps
	}
	return out
}

func clampUint32(v int64) uint32 {
	switch {
	case v < 0:
		return 0
	case v > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(v)
}
