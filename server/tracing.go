package server

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/ratelimit"
)

// TracingOptions configure OpenTelemetry tracing of decisions. The zero
// value traces nothing, at the cost of one nil check per request.
//
// With a Provider, every ShouldRateLimit call (gRPC, POST /json) and every
// POST /v1/check gets a server span, a child of the trace context the caller
// sent (W3C traceparent in gRPC metadata or HTTP headers), and every store
// call made for it a child span of its own. The spans carry the domain, the
// number of descriptors and the outcome code; the descriptors' values, which
// may be user data, only with DescriptorValues.
type TracingOptions struct {
	// Provider makes the tracer; nil turns tracing off.
	Provider trace.TracerProvider
	// Propagator reads the caller's trace context; W3C trace context and
	// baggage when nil.
	Propagator propagation.TextMapPropagator
	// DescriptorValues records each descriptor's entries ("key=value,...")
	// on the server span.
	DescriptorValues bool

	tracer trace.Tracer // from Provider, by NewService
}

// tracerName is the instrumentation scope of floodgate's spans.
const tracerName = "github.com/floodgate-dev/floodgate/server"

// Span names.
const (
	spanGRPC  = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	spanJSON  = "POST /json"
	spanCheck = "POST /v1/check"
	spanStore = "floodgate.store"

	// envoyproxy/ratelimit's names, in envoy compatibility mode: its
	// service's span inside the server span, and its Redis call's.
	spanEnvoyExecution = "ShouldRateLimit Execution"
	spanEnvoyStore     = "Redis Pipeline Execution"
)

// Span attributes.
const (
	attrDomain      = attribute.Key("floodgate.domain")
	attrDescriptors = attribute.Key("floodgate.descriptors")
	attrValues      = attribute.Key("floodgate.descriptor_values")
	attrCode        = attribute.Key("floodgate.code")
	attrStore       = attribute.Key("floodgate.store_name") // with a per-second store: main or persecond
)

// init prepares the tracer; tracing stays off without a Provider.
func (o *TracingOptions) init() {
	if o.Provider == nil {
		return
	}
	if o.Propagator == nil {
		o.Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	o.tracer = o.Provider.Tracer(tracerName)
}

// traceDomainKey carries a traced request's domain to its store spans.
type traceDomainKey struct{}

// startSpan starts the server span of a request whose trace context, if
// any, is in carrier.
func (s *Service) startSpan(ctx context.Context, name string, carrier propagation.TextMapCarrier, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	t := &s.opts.Tracing
	ctx = t.Propagator.Extract(ctx, carrier)
	return t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// traceRequest records in on the server span of ctx and returns the context
// its store calls are to run in. Without tracing it returns ctx.
func (s *Service) traceRequest(ctx context.Context, in *Request) context.Context {
	if s.opts.Tracing.tracer == nil || in == nil {
		return ctx
	}
	return s.traceRequestSpan(ctx, in)
}

func (s *Service) traceRequestSpan(ctx context.Context, in *Request) context.Context {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return ctx
	}
	span.SetAttributes(attrDomain.String(in.Domain), attrDescriptors.Int(len(in.Descriptors)))
	if s.opts.Tracing.DescriptorValues {
		vals := make([]string, len(in.Descriptors))
		for i, d := range in.Descriptors {
			var b strings.Builder
			for j, e := range d.Entries {
				if j > 0 {
					b.WriteByte(',')
				}
				b.WriteString(e.Key + "=" + e.Value)
			}
			vals[i] = b.String()
		}
		span.SetAttributes(attrValues.StringSlice(vals))
	}
	return context.WithValue(ctx, traceDomainKey{}, in.Domain)
}

// endSpan ends a server span with the request's outcome: its code (OK,
// OVER_LIMIT) or its error.
func endSpan(span trace.Span, code string, err error) {
	span.SetAttributes(attrCode.String(code))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// answerTraced is answer (decide) under a server span, the child of the
// trace context in the call's metadata.
func (r *RLS) answerTraced(ctx context.Context, in *Request, decide func(context.Context) (*Response, error)) (*Response, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	ctx, span := r.s.startSpan(ctx, spanGRPC, metadataCarrier(md),
		attribute.String("rpc.system", "grpc"),
		attribute.String("rpc.service", "envoy.service.ratelimit.v3.RateLimitService"),
		attribute.String("rpc.method", "ShouldRateLimit"))
	out, err := decide(r.s.traceRequest(ctx, in))
	code := status.Code(err).String() // a gRPC status error
	if err == nil {
		code = out.Code.String()
	}
	endSpan(span, code, err)
	return out, err
}

// traceHTTP runs serve, which answers r and returns its metrics code label,
// under a server span (with tracing on), the child of the trace context in
// r's headers.
func (h *httpAPI) traceHTTP(name string, w http.ResponseWriter, r *http.Request, serve func(http.ResponseWriter, *http.Request) string) string {
	if h.s.opts.Tracing.tracer == nil {
		return serve(w, r)
	}
	ctx, span := h.s.startSpan(r.Context(), name, propagation.HeaderCarrier(r.Header),
		attribute.String("http.request.method", r.Method),
		attribute.String("url.path", r.URL.Path))
	code := serve(w, r.WithContext(ctx))
	switch code {
	case CodeOK.String(), CodeOverLimit.String():
	default:
		span.SetStatus(codes.Error, code)
	}
	endSpan(span, code, nil)
	return code
}

// envoyExecutionSpan starts, under a recording span, envoyproxy/ratelimit's
// "ShouldRateLimit Execution" span (envoyDecide); end ends it (a no-op
// otherwise).
func (s *Service) envoyExecutionSpan(ctx context.Context) (_ context.Context, end func()) {
	if s.opts.Tracing.tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, func() {}
	}
	ctx, span := s.opts.Tracing.tracer.Start(ctx, spanEnvoyExecution)
	return ctx, func() { span.End() }
}

// allowTraced is allowStore under a store span.
func (s *Service) allowTraced(ctx context.Context, st *store, reqs []ratelimit.Request, results []ratelimit.Result) (bool, error) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return s.allowStore(ctx, st, reqs, results) // not sampled
	}
	domain, _ := ctx.Value(traceDomainKey{}).(string)
	ctx, span := s.opts.Tracing.tracer.Start(ctx, s.storeSpan, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrDomain.String(domain), attrDescriptors.Int(len(reqs))))
	if s.ps != nil {
		span.SetAttributes(attrStore.String(st.name))
	}
	ok, err := s.allowStore(ctx, st, reqs, results)
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
	endSpan(span, code, err)
	return ok, err
}

// metadataCarrier reads and writes gRPC metadata for a propagator.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
