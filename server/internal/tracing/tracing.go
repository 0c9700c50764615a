// Package tracing is the decision server's OpenTelemetry spans: a server
// span per request, the child of the trace context the caller sent, the
// request's domain and descriptors on it, and a client span per store call.
// A nil *Tracer traces nothing; every method is then a no-op that costs a
// nil check.
package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-dev/floodgate/server/decision"
)

// Options configure OpenTelemetry tracing of decisions. The zero value
// traces nothing, at the cost of one nil check per request.
//
// With a Provider, every ShouldRateLimit call (gRPC, POST /json) and every
// POST /v1/check gets a server span, a child of the trace context the caller
// sent (W3C traceparent in gRPC metadata or HTTP headers), and every store
// call made for it a child span of its own. The spans carry the domain, the
// number of descriptors and the outcome code; the descriptors' values, which
// may be user data, only with DescriptorValues.
type Options struct {
	// Provider makes the tracer; nil turns tracing off.
	Provider trace.TracerProvider
	// Propagator reads the caller's trace context; W3C trace context and
	// baggage when nil.
	Propagator propagation.TextMapPropagator
	// DescriptorValues records each descriptor's entries ("key=value,...")
	// on the server span.
	DescriptorValues bool
}

// Name is the instrumentation scope of floodgate's spans.
const Name = "github.com/floodgate-dev/floodgate/server"

// Span names.
const (
	SpanGRPC  = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	SpanJSON  = "POST /json"
	SpanCheck = "POST /v1/check"
	SpanStore = "floodgate.store"

	// envoyproxy/ratelimit's names, in envoy compatibility mode: its
	// service's span inside the server span, and its Redis call's.
	SpanEnvoyExecution = "ShouldRateLimit Execution"
	SpanEnvoyStore     = "Redis Pipeline Execution"
)

// Span attributes.
const (
	AttrDomain      = attribute.Key("floodgate.domain")
	AttrDescriptors = attribute.Key("floodgate.descriptors")
	AttrValues      = attribute.Key("floodgate.descriptor_values")
	AttrCode        = attribute.Key("floodgate.code")
	AttrStore       = attribute.Key("floodgate.store_name") // with a per-second store: main or persecond
)

// Tracer makes the spans of one service. Safe for concurrent use.
type Tracer struct {
	t         trace.Tracer
	prop      propagation.TextMapPropagator
	values    bool
	storeSpan string
}

// New returns the tracer of o whose store calls' spans are named
// storeSpan, or nil (tracing off) without a Provider.
func New(o Options, storeSpan string) *Tracer {
	if o.Provider == nil {
		return nil
	}
	if o.Propagator == nil {
		o.Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	return &Tracer{t: o.Provider.Tracer(Name), prop: o.Propagator, values: o.DescriptorValues, storeSpan: storeSpan}
}

// domainKey carries a traced request's domain to its store spans.
type domainKey struct{}

// Server starts the server span of a request whose trace context, if any,
// is in carrier.
func (t *Tracer) Server(ctx context.Context, name string, carrier propagation.TextMapCarrier, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx = t.prop.Extract(ctx, carrier)
	return t.t.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// GRPC starts the server span of a ShouldRateLimit call, the child of the
// trace context in its metadata.
func (t *Tracer) GRPC(ctx context.Context) (context.Context, trace.Span) {
	md, _ := metadata.FromIncomingContext(ctx)
	return t.Server(ctx, SpanGRPC, metadataCarrier(md),
		attribute.String("rpc.system", "grpc"),
		attribute.String("rpc.service", "envoy.service.ratelimit.v3.RateLimitService"),
		attribute.String("rpc.method", "ShouldRateLimit"))
}

// Request records in on the server span of ctx and returns the context its
// store calls are to run in. Without tracing, or without a request, it
// returns ctx.
func (t *Tracer) Request(ctx context.Context, in *decision.Request) context.Context {
	if t == nil || in == nil {
		return ctx
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return ctx
	}
	span.SetAttributes(AttrDomain.String(in.Domain), AttrDescriptors.Int(len(in.Descriptors)))
	if t.values {
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
		span.SetAttributes(AttrValues.StringSlice(vals))
	}
	return context.WithValue(ctx, domainKey{}, in.Domain)
}

// End ends a span with the request's outcome: its code (OK, OVER_LIMIT)
// or its error.
func End(span trace.Span, code string, err error) {
	span.SetAttributes(AttrCode.String(code))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Fail marks span failed with the code it ends with.
func Fail(span trace.Span, code string) { span.SetStatus(codes.Error, code) }

// EnvoyExecution starts, under a recording span, envoyproxy/ratelimit's
// "ShouldRateLimit Execution" span; end ends it (a no-op otherwise).
func (t *Tracer) EnvoyExecution(ctx context.Context) (_ context.Context, end func()) {
	if t == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, func() {}
	}
	ctx, span := t.t.Start(ctx, SpanEnvoyExecution)
	return ctx, func() { span.End() }
}

// Store starts the client span of a store call of n requests under a
// recording span, naming the store when store is not empty; ok is false
// (and no span started) when ctx's span is not sampled.
func (t *Tracer) Store(ctx context.Context, n int, store string) (_ context.Context, _ trace.Span, ok bool) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, nil, false
	}
	domain, _ := ctx.Value(domainKey{}).(string)
	ctx, span := t.t.Start(ctx, t.storeSpan, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(AttrDomain.String(domain), AttrDescriptors.Int(n)))
	if store != "" {
		span.SetAttributes(AttrStore.String(store))
	}
	return ctx, span, true
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
