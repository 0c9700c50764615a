package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/server/internal/tracing"
)

// The caller's span, as a W3C traceparent.
const (
	callerTrace     = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan      = "00f067aa0ba902b7"
	callerSampled   = "00-" + callerTrace + "-" + callerSpan + "-01"
	callerUnsampled = "00-" + callerTrace + "-" + callerSpan + "-00"
)

// tracingProvider returns a provider that records spans, as the OTLP one
// does (parent-based sampling), in an in-memory exporter.
func tracingProvider(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp, exp
}

func spanAttr(s tracetest.SpanStub, k attribute.Key) (attribute.Value, bool) {
	for _, a := range s.Attributes {
		if a.Key == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// checkTrace checks that spans are one server span named name, a child of
// the caller's span, deciding domain api with descriptors descriptors and
// answering code, and store spans under it; it returns the server span.
func checkTrace(t *testing.T, spans tracetest.SpanStubs, name string, descriptors int, code string) tracetest.SpanStub {
	t.Helper()
	var server *tracetest.SpanStub
	var stores []tracetest.SpanStub
	for i, s := range spans {
		switch s.Name {
		case name:
			if server != nil {
				t.Fatalf("two %s spans", name)
			}
			server = &spans[i]
		case tracing.SpanStore:
			stores = append(stores, s)
		default:
			t.Errorf("unexpected span %q", s.Name)
		}
	}
	if server == nil {
		t.Fatalf("no %s span among %d", name, len(spans))
	}
	if got := server.SpanContext.TraceID().String(); got != callerTrace {
		t.Errorf("server span's trace %s, want the caller's %s", got, callerTrace)
	}
	if got := server.Parent.SpanID().String(); got != callerSpan || !server.Parent.IsRemote() {
		t.Errorf("server span's parent %s (remote %v), want the caller's %s", got, server.Parent.IsRemote(), callerSpan)
	}
	if server.SpanKind != trace.SpanKindServer {
		t.Errorf("server span's kind %v", server.SpanKind)
	}
	for k, want := range map[attribute.Key]attribute.Value{
		tracing.AttrDomain:      attribute.StringValue("api"),
		tracing.AttrDescriptors: attribute.IntValue(descriptors),
		tracing.AttrCode:        attribute.StringValue(code),
	} {
		if v, ok := spanAttr(*server, k); !ok || v != want {
			t.Errorf("server span's %s = %v, want %v", k, v.String(), want.String())
		}
	}
	if _, ok := spanAttr(*server, tracing.AttrValues); ok {
		t.Errorf("server span records descriptor values without DescriptorValues")
	}
	if len(stores) == 0 {
		t.Fatalf("no store span")
	}
	for _, st := range stores {
		if st.Parent.SpanID() != server.SpanContext.SpanID() || st.SpanContext.TraceID() != server.SpanContext.TraceID() {
			t.Errorf("store span's parent %s, want the server span %s", st.Parent.SpanID(), server.SpanContext.SpanID())
		}
		if v, _ := spanAttr(st, tracing.AttrDomain); v.AsString() != "api" {
			t.Errorf("store span's domain %q", v.AsString())
		}
		if v, _ := spanAttr(st, tracing.AttrCode); v.AsString() != code {
			t.Errorf("store span's code %q, want %q", v.AsString(), code)
		}
		for _, a := range st.Attributes {
			if strings.Contains(a.Value.String(), "gil") {
				t.Errorf("store span records a descriptor value: %s=%s", a.Key, a.Value.String())
			}
		}
	}
	for _, a := range server.Attributes {
		if strings.Contains(a.Value.String(), "gil") {
			t.Errorf("server span records a descriptor value: %s=%s", a.Key, a.Value.String())
		}
	}
	return *server
}

func rlsRequest() *rls.RateLimitRequest {
	return &rls.RateLimitRequest{Domain: "api", HitsAddend: 2, Descriptors: []*rlscommon.RateLimitDescriptor{
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: "gil"}}},
	}}
}

// TestTracingGRPC: a ShouldRateLimit call carrying a traceparent gets a
// server span, a child of the caller's, with the store call's span under it;
// an unsampled caller gets none.
func TestTracingGRPC(t *testing.T) {
	tp, exp := tracingProvider(t)
	dir := t.TempDir()
	writeConfig(t, filepath.Join(dir, "api.yaml"), testYAML)
	srv := startServer(t, Config{ConfigPath: dir, Service: Options{Tracing: TracingOptions{Provider: tp}}})
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rls.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for _, code := range []string{"OK", "OVER_LIMIT"} {
		exp.Reset()
		resp, err := client.ShouldRateLimit(metadata.AppendToOutgoingContext(ctx, "traceparent", callerSampled), rlsRequest())
		if err != nil || resp.OverallCode.String() != code {
			t.Fatalf("%v %v, want %s", resp, err, code)
		}
		s := checkTrace(t, exp.GetSpans(), tracing.SpanGRPC, 1, code)
		if v, _ := spanAttr(s, "rpc.method"); v.AsString() != "ShouldRateLimit" {
			t.Errorf("rpc.method %q", v.AsString())
		}
	}

	exp.Reset()
	if _, err := client.ShouldRateLimit(metadata.AppendToOutgoingContext(ctx, "traceparent", callerUnsampled), rlsRequest()); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("an unsampled caller: %d spans", n)
	}

	// An error is recorded on the span.
	exp.Reset()
	if _, err := client.ShouldRateLimit(metadata.AppendToOutgoingContext(ctx, "traceparent", callerSampled), &rls.RateLimitRequest{Domain: "api"}); err == nil {
		t.Fatal("no error for a request without descriptors")
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Status.Code.String() != "Error" {
		t.Fatalf("an invalid request: %+v", spans)
	}
	if v, _ := spanAttr(spans[0], tracing.AttrCode); v.AsString() != "InvalidArgument" {
		t.Errorf("code %q", v.AsString())
	}
}

// TestTracingHTTP: POST /json and POST /v1/check with a traceparent header
// get a server span, a child of the caller's, with the store span under it.
func TestTracingHTTP(t *testing.T) {
	tp, exp := tracingProvider(t)
	s := newService(t, backend.NewMemory(), Options{Tracing: TracingOptions{Provider: tp}})
	h := NewHTTPHandler(s, HTTPOptions{})

	w := post(t, h, "/json", `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"gil"}]},{"entries":[{"key":"none","value":"x"}]}]}`, "traceparent", callerSampled)
	if w.Code != 200 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	checkTrace(t, exp.GetSpans(), tracing.SpanJSON, 2, "OK")

	exp.Reset()
	w = post(t, h, "/v1/check", `{"domain":"api","descriptors":[{"user":"gil"}],"cost":5}`, "traceparent", callerSampled)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	s1 := checkTrace(t, exp.GetSpans(), tracing.SpanCheck, 1, "OVER_LIMIT")
	if v, _ := spanAttr(s1, "url.path"); v.AsString() != "/v1/check" {
		t.Errorf("url.path %q", v.AsString())
	}

	// Without a caller's context: a root span of its own.
	exp.Reset()
	post(t, h, "/v1/check", `{"domain":"api","descriptors":[{"user":"gil"}]}`)
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	for _, sp := range spans {
		if sp.Name == tracing.SpanCheck && sp.Parent.IsValid() {
			t.Errorf("a root request's span has a parent %v", sp.Parent)
		}
	}
}

// TestTracingDescriptorValues: the descriptors' values are recorded only when
// asked for.
func TestTracingDescriptorValues(t *testing.T) {
	tp, exp := tracingProvider(t)
	s := newService(t, backend.NewMemory(), Options{Tracing: TracingOptions{Provider: tp, DescriptorValues: true}})
	h := NewHTTPHandler(s, HTTPOptions{})
	post(t, h, "/v1/check", `{"domain":"api","descriptors":[{"user":"gil"},{"path":"/upload","user":"ann"}]}`)
	for _, sp := range exp.GetSpans() {
		if sp.Name != tracing.SpanCheck {
			continue
		}
		v, ok := spanAttr(sp, tracing.AttrValues)
		if got := strings.Join(v.AsStringSlice(), " | "); !ok || got != "user=gil | path=/upload,user=ann" {
			t.Fatalf("descriptor values %q", got)
		}
		return
	}
	t.Fatal("no server span")
}

// TestTracingOff: without TracingOptions nothing is traced, not even with a
// global provider set and a caller's traceparent.
func TestTracingOff(t *testing.T) {
	tp, exp := tracingProvider(t)
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	dir := t.TempDir()
	writeConfig(t, filepath.Join(dir, "api.yaml"), testYAML)
	srv := startServer(t, Config{ConfigPath: dir})
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rls.NewRateLimitServiceClient(conn).ShouldRateLimit(metadata.AppendToOutgoingContext(ctx, "traceparent", callerSampled), rlsRequest()); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", "http://"+srv.HTTPAddr()+"/v1/check", strings.NewReader(`{"domain":"api","descriptors":[{"user":"gil"}]}`))
	req.RequestURI = ""
	req.Header.Set("traceparent", callerSampled)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("tracing off: %d spans", n)
	}
	if srv.Service().tracer != nil {
		t.Fatal("tracing off: a tracer")
	}
}
