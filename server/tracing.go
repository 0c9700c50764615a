package server

import (
	"context"

	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/internal/api"
	"github.com/floodgate-dev/floodgate/server/internal/tracing"
)

// TracingOptions configure OpenTelemetry tracing of decisions (package
// server/internal/tracing). The zero value traces nothing, at the cost of
// one nil check per request.
//
// With a Provider, every ShouldRateLimit call (gRPC, POST /json) and every
// POST /v1/check gets a server span, a child of the trace context the caller
// sent (W3C traceparent in gRPC metadata or HTTP headers), and every store
// call made for it a child span of its own. The spans carry the domain, the
// number of descriptors and the outcome code; the descriptors' values, which
// may be user data, only with DescriptorValues.
type TracingOptions = tracing.Options

// allowTraced is allowStore under a store span.
func (s *Service) allowTraced(ctx context.Context, st *store, reqs []ratelimit.Request, results []ratelimit.Result, lz *ratelimit.Leased) (bool, error) {
	name := ""
	if s.ps != nil {
		name = st.name
	}
	ctx, span, ok := s.tracer.Store(ctx, len(reqs), name)
	if !ok {
		return s.allowStore(ctx, st, reqs, results, lz) // not sampled
	}
	allowed, err := s.allowStore(ctx, st, reqs, results, lz)
	code := CodeOK.String()
	switch {
	case err != nil:
		code = api.Label(err)
	default:
		for _, r := range results {
			if r.RetryAfter != 0 {
				code = CodeOverLimit.String()
				break
			}
		}
	}
	tracing.End(span, code, err)
	return allowed, err
}
