package server

import (
	"context"
	"errors"
	"math"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/envoy"
)

// RLS serves Envoy's rate limit service, envoy.service.ratelimit.v3, from a
// Service. Register it with rls.RegisterRateLimitServiceServer; Server
// registers it with a hand-written codec instead (rls_wire.go), which gives
// the same answers for less CPU.
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
	in, err := fromProto(req)
	out, err := r.answer(ctx, start, in, err)
	if err != nil {
		return nil, err
	}
	p := toProto(out)
	p.DynamicMetadata = r.s.envoyDynamicMetadata(req, out)
	return p, nil
}

// answer decides in, a request received at start, and counts it in the
// metrics. decodeErr, when not nil, is the error reading the request gave: it
// is answered instead. Errors are gRPC status errors. Both ShouldRateLimit and
// the hand-written codec's handler answer through it.
func (r *RLS) answer(ctx context.Context, start time.Time, in *Request, decodeErr error) (*Response, error) {
	if r.s.opts.Tracing.tracer != nil {
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
		code := grpcCodes[kind]
		if kind == "envoy" || kind == "unavailable" && r.s.opts.Envoy.Enabled {
			// envoyproxy/ratelimit returns its service and Redis errors as
			// plain errors, which gRPC sends as Unknown.
			code = codes.Unknown
		}
		return nil, status.Error(code, err.Error())
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

// fromProto converts an Envoy request. The request's hits_addend applies to
// every descriptor without its own; 0 means 1, as in envoyproxy/ratelimit. A
// descriptor's own hits_addend is taken as given, so 0 peeks. Negative hits
// (is_negative_hits) are not supported: such a descriptor peeks.
func fromProto(req *rls.RateLimitRequest) (*Request, error) {
	if req == nil {
		return nil, inputErrorf("request is empty")
	}
	cost := requestCost(req.GetHitsAddend())
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
		f := rlsDescriptor{negativeHits: d.GetIsNegativeHits()}
		if h := d.GetHitsAddend(); h != nil {
			f.hasHitsAddend, f.hitsAddend = true, h.GetValue()
		}
		if o := d.GetLimit(); o != nil {
			f.hasLimit, f.requestsPerUnit, f.unit = true, o.GetRequestsPerUnit(), int32(o.GetUnit())
			f.unitMultiplier = o.GetUnitMultiplier().GetValue()
		}
		if err := f.apply(i, cost, dd); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// requestCost is the cost of a descriptor without a hits_addend of its own in
// a request whose hits_addend is h.
func requestCost(h uint32) int64 {
	if h == 0 {
		return 1
	}
	return int64(h)
}

// rlsDescriptor is what an Envoy RateLimitDescriptor says besides its
// entries, as fromProto and the hand-written decoder read it; its zero value
// is a descriptor that sets none of these fields.
type rlsDescriptor struct {
	hitsAddend      uint64 // its own hits_addend, when hasHitsAddend
	hasHitsAddend   bool
	negativeHits    bool
	hasLimit        bool // the fields below are its limit override's
	requestsPerUnit uint32
	unit            int32  // envoy.type.v3.RateLimitUnit
	unitMultiplier  uint32 // 0 when unset
}

// apply sets the Cost and Override of d, the i-th descriptor of a request
// whose cost is cost (requestCost). The error is an InputError naming
// descriptors[i].
func (f *rlsDescriptor) apply(i int, cost int64, d *Descriptor) error {
	d.Cost = cost
	if f.hasHitsAddend {
		if f.hitsAddend > math.MaxInt64/2 {
			return inputErrorf("descriptors[%d].hits_addend %d is too large", i, f.hitsAddend)
		}
		d.Cost = int64(f.hitsAddend)
	}
	if f.negativeHits {
		d.Cost = 0
	}
	if f.hasLimit {
		if f.unitMultiplier > 1 {
			return inputErrorf("descriptors[%d].limit.unit_multiplier is not supported", i)
		}
		d.Override = &Override{RequestsPerUnit: f.requestsPerUnit, Unit: overrideUnit(f.unit)}
	}
	return nil
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
		l, remaining, reset := statusFields(st)
		if l != nil {
			ps.CurrentLimit = &rls.RateLimitResponse_RateLimit{
				Name:            l.Name,
				RequestsPerUnit: l.RequestsPerUnit,
				Unit:            rls.RateLimitResponse_RateLimit_Unit(l.Unit),
			}
		}
		ps.LimitRemaining = remaining
		if reset > 0 {
			ps.DurationUntilReset = durationpb.New(reset)
		}
		out.Statuses[i] = ps
	}
	for _, h := range r.Headers {
		out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corev3.HeaderValue{Key: h.Key, Value: h.Value})
	}
	return out
}

// statusFields returns what the DescriptorStatus of st says besides its code:
// the limit of current_limit (nil for none: no limit, or an unlimited one),
// limit_remaining, and duration_until_reset (0 for none). toProto and the
// hand-written encoder both answer from it.
func statusFields(st *Status) (current *config.Limit, remaining uint32, reset time.Duration) {
	l := st.Limit
	switch {
	case l == nil:
		return nil, 0, 0
	case l.Unlimited:
		return nil, math.MaxUint32, 0
	}
	return l, clampUint32(st.Remaining), max(st.ResetAfter, 0)
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
