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
	resp, err := r.decide(ctx, req)
	if m := r.s.opts.Metrics; m != nil {
		m.request("grpc", answerCode(resp, err), time.Since(start))
	}
	return resp, err
}

func (r *RLS) decide(ctx context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	in, err := fromProto(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	out, err := r.s.Decide(ctx, in)
	if err != nil {
		return nil, grpcError(err)
	}
	return toProto(out), nil
}

// grpcError maps a Decide error to a gRPC status.
func grpcError(err error) error {
	var ie *InputError
	switch {
	case errors.As(err, &ie):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// answerCode is the code label of a request's metrics.
func answerCode(resp interface {
	GetOverallCode() rls.RateLimitResponse_Code
}, err error) string {
	if err != nil {
		var ie *InputError
		switch {
		case errors.As(err, &ie) || status.Code(err) == codes.InvalidArgument:
			return "invalid"
		case errors.Is(err, ErrUnavailable) || status.Code(err) == codes.Unavailable:
			return "unavailable"
		}
		return "error"
	}
	return resp.GetOverallCode().String()
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
