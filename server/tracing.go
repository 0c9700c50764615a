package server

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/ratelimit"
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

// answerTraced is answer (decide) under a server span, the child of the
// trace context in the call's metadata.
func (r *RLS) answerTraced(ctx context.Context, in *Request, decide func(context.Context) (*Response, error)) (*Response, error) {
	ctx, span := r.s.tracer.GRPC(ctx)
	out, err := decide(r.s.tracer.Request(ctx, in))
	code := status.Code(err).String() // a gRPC status error
	if err == nil {
		code = out.Code.String()
	}
	tracing.End(span, code, err)
	return out, err
}

// traceHTTP runs serve, which answers r and returns its metrics code label,
// under a server span (with tracing on), the child of the trace context in
// r's headers.
func (h *httpAPI) traceHTTP(name string, w http.ResponseWriter, r *http.Request, serve func(http.ResponseWriter, *http.Request) string) string {
	t := h.s.tracer
	if t == nil {
		return serve(w, r)
	}
	ctx, span := t.Server(r.Context(), name, propagation.HeaderCarrier(r.Header),
		attribute.String("http.request.method", r.Method),
		attribute.String("url.path", r.URL.Path))
	code := serve(w, r.WithContext(ctx))
	switch code {
	case CodeOK.String(), CodeOverLimit.String():
	default:
		tracing.Fail(span, code)
	}
	tracing.End(span, code, nil)
	return code
}

// allowTraced is allowStore under a store span.
func (s *Service) allowTraced(ctx context.Context, st *store, reqs []ratelimit.Request, results []ratelimit.Result) (bool, error) {
	name := ""
	if s.ps != nil {
		name = st.name
	}
	ctx, span, ok := s.tracer.Store(ctx, len(reqs), name)
	if !ok {
		return s.allowStore(ctx, st, reqs, results) // not sampled
	}
	allowed, err := s.allowStore(ctx, st, reqs, results)
	code := CodeOK.String()
	switch {
	case err != nil:
		code = codeLabel(errorKind(err))
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
