package main

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

func TestReadEnvoyTracing(t *testing.T) {
	es, err := readEnvoyEnv(lookupOf(map[string]string{"TRACING_SERVICE_NAME": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	for k := range es.flags {
		if strings.HasPrefix(k, "tracing") {
			t.Errorf("tracing off: --%s = %q", k, es.flags[k])
		}
	}
	for _, n := range es.notices {
		if strings.HasPrefix(n, "TRACING") {
			t.Errorf("notice %q for an honoured variable", n)
		}
	}

	es, err = readEnvoyEnv(lookupOf(map[string]string{"TRACING_ENABLED": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"tracing": "true", "tracing-service-name": "RateLimit", "tracing-protocol": "http"} {
		if es.flags[k] != v {
			t.Errorf("envoy's defaults: --%s = %q, want %q", k, es.flags[k], v)
		}
	}

	es, err = readEnvoyEnv(lookupOf(map[string]string{"TRACING_ENABLED": "true", "TRACING_SERVICE_NAME": "rl",
		"TRACING_SERVICE_NAMESPACE": "edge", "TRACING_SERVICE_INSTANCE_ID": "pod-1", "TRACING_EXPORTER_PROTOCOL": "GRPC",
		"TRACING_SAMPLING_RATE": "0.25"}))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"tracing": "true", "tracing-service-name": "rl", "tracing-service-namespace": "edge",
		"tracing-service-instance-id": "pod-1", "tracing-protocol": "grpc", "tracing-sampling-rate": "0.25"} {
		if es.flags[k] != v {
			t.Errorf("--%s = %q, want %q", k, es.flags[k], v)
		}
	}

	es, err = readEnvoyEnv(lookupOf(map[string]string{"TRACING_ENABLED": "true", "TRACING_SAMPLING_RATE": "5"}))
	if err != nil || es.flags["tracing-sampling-rate"] != "1" {
		t.Errorf("a rate of 5: %v %q, want 1", err, es.flags["tracing-sampling-rate"])
	}
	for env, name := range map[string]string{"TRACING_EXPORTER_PROTOCOL": "zipkin", "TRACING_SAMPLING_RATE": "most"} {
		_, err := readEnvoyEnv(lookupOf(map[string]string{"TRACING_ENABLED": "true", env: name}))
		if err == nil || !strings.Contains(err.Error(), env) {
			t.Errorf("%s=%s: %v, want an error naming it", env, name, err)
		}
	}
}

func TestTracingFlags(t *testing.T) {
	noEnv := func(string) string { return "" }
	if tp, err := newTracerProvider(context.Background(), &tracingFlags{samplingRate: 1}, noEnv); tp != nil || err != nil {
		t.Fatalf("off: %v %v", tp, err)
	}
	if _, err := newTracerProvider(context.Background(), &tracingFlags{enabled: true, samplingRate: 2}, noEnv); err == nil {
		t.Error("a sampling rate of 2 accepted")
	}
	if _, err := newTracerProvider(context.Background(), &tracingFlags{enabled: true, samplingRate: 1, protocol: "udp"}, noEnv); err == nil {
		t.Error("protocol udp accepted")
	}
	for _, tc := range []struct{ flag, env, want string }{
		{"", "", "http"}, {"grpc", "", "grpc"}, {"", "grpc", "grpc"}, {"", "http/protobuf", "http"}, {"http", "grpc", "http"},
	} {
		f := tracingFlags{protocol: tc.flag}
		got, err := f.otlpProtocol(func(k string) string {
			if k == "OTEL_EXPORTER_OTLP_PROTOCOL" {
				return tc.env
			}
			return ""
		})
		if err != nil || got != tc.want {
			t.Errorf("flag %q, OTEL_EXPORTER_OTLP_PROTOCOL %q: %q %v, want %q", tc.flag, tc.env, got, err, tc.want)
		}
	}
	tp, err := newTracerProvider(context.Background(), &tracingFlags{endpoint: "127.0.0.1:1", samplingRate: 1, protocol: "grpc"}, noEnv)
	if err != nil || tp == nil {
		t.Fatalf("grpc exporter: %v %v", tp, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	tp.Shutdown(ctx)
}

// otlpReceiver is an OTLP/HTTP trace receiver of the test's own.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
	attrs map[string]string // the resource's string attributes, last seen
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{attrs: map[string]string{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var msg coltrace.ExportTraceServiceRequest
		if req.URL.Path != "/v1/traces" || proto.Unmarshal(body, &msg) != nil {
			t.Errorf("OTLP receiver: %s %s (%d bytes)", req.Method, req.URL.Path, len(body))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range msg.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				r.attrs[a.Key] = a.GetValue().GetStringValue()
			}
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

// TestServeTracing: `floodgate serve --otlp-endpoint` exports a
// ShouldRateLimit call's server span, a child of the caller's traceparent,
// and its store span, over OTLP/HTTP (sent at the latest when it stops); and
// --tracing takes the endpoint from OTEL_EXPORTER_OTLP_ENDPOINT.
func TestServeTracing(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "rl.yaml")
	writeConfig(t, cfg, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, how := range []string{"flag", "env"} {
		t.Run(how, func(t *testing.T) {
			recv := newOTLPReceiver(t)
			var s *fgServer
			if how == "flag" {
				s = startServer(t, cfg, "--otlp-endpoint", recv.URL, "--tracing-service-name", "fg-test")
			} else {
				s = startServerEnv(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + recv.URL, "OTEL_SERVICE_NAME=fg-env"}, cfg, "--tracing")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+traceID+"-"+parentID+"-01")
			if _, err := s.client.ShouldRateLimit(ctx, request("api", entries("user", "alice"))); err != nil {
				t.Fatal(err)
			}
			if !s.stop() || s.exitCode != 0 {
				t.Fatalf("exit %d", s.exitCode)
			}
			recv.mu.Lock()
			defer recv.mu.Unlock()
			var server, store *tracepb.Span
			for _, sp := range recv.spans {
				switch sp.Name {
				case "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit":
					server = sp
				case "floodgate.store":
					store = sp
				}
			}
			if server == nil || store == nil {
				t.Fatalf("spans received: %v", recv.spans)
			}
			if hex.EncodeToString(server.TraceId) != traceID || hex.EncodeToString(server.ParentSpanId) != parentID {
				t.Errorf("server span: trace %x parent %x", server.TraceId, server.ParentSpanId)
			}
			if string(store.ParentSpanId) != string(server.SpanId) {
				t.Errorf("store span's parent %x, want %x", store.ParentSpanId, server.SpanId)
			}
			want := map[string]string{"flag": "fg-test", "env": "fg-env"}[how]
			if recv.attrs["service.name"] != want || recv.attrs["service.instance.id"] == "" {
				t.Errorf("resource %v, want service.name %s", recv.attrs, want)
			}
		})
	}
}

// TestEnvoyCompatTracing: with envoy's TRACING_ENABLED, a ShouldRateLimit
// call exports envoy's spans: the gRPC server span, its child "ShouldRateLimit
// Execution" (envoyproxy/ratelimit f2fb157, test/service TestServiceTracer),
// and the store call under it as "Redis Pipeline Execution".
func TestEnvoyCompatTracing(t *testing.T) {
	recv := newOTLPReceiver(t)
	r := testenv.NewRedis(t)
	s := startEnvoyCompat(t, r, envoyRuntime(t, envoyTestConfig), "TRACING_ENABLED=true", "OTEL_EXPORTER_OTLP_ENDPOINT="+recv.URL)
	s.mustRL(request("envoy-compat", entries("per_minute", "trace")))
	if !s.stop() || s.exitCode != 0 {
		t.Fatalf("exit %d", s.exitCode)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	byName := map[string]*tracepb.Span{}
	for _, sp := range recv.spans {
		byName[sp.Name] = sp
	}
	server, exec, store := byName["envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"], byName["ShouldRateLimit Execution"], byName["Redis Pipeline Execution"]
	if server == nil || exec == nil || store == nil {
		t.Fatalf("spans received: %v", recv.spans)
	}
	if string(exec.ParentSpanId) != string(server.SpanId) || string(store.ParentSpanId) != string(exec.SpanId) {
		t.Errorf("parents: execution %x (server %x), store %x (execution %x)", exec.ParentSpanId, server.SpanId, store.ParentSpanId, exec.SpanId)
	}
	if recv.attrs["service.name"] != "RateLimit" {
		t.Errorf("service.name %q, want envoy's RateLimit", recv.attrs["service.name"])
	}
}
