package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// tracingFlags are serve's tracing settings. Tracing is on with --tracing or
// --otlp-endpoint; the OTLP exporter also reads the standard
// OTEL_EXPORTER_OTLP_* variables (endpoint, headers, TLS, timeout,
// compression), which the flags override.
type tracingFlags struct {
	enabled          bool
	endpoint         string  // "" for OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, else the exporter's default
	protocol         string  // http or grpc; "" for OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL, else http
	samplingRate     float64 // of the traces this server starts; a caller's sampling decision is followed
	serviceName      string  // "" for OTEL_SERVICE_NAME, else floodgate
	serviceNamespace string
	instanceID       string // "" for a random one
	descriptorValues bool
}

// on reports whether tracing is configured.
func (t *tracingFlags) on() bool { return t.enabled || t.endpoint != "" }

// otlpProtocol resolves the exporter's protocol: the flag, else the OTEL
// variables ("grpc", "http/protobuf"), else http.
func (t *tracingFlags) otlpProtocol(getenv func(string) string) (string, error) {
	p := t.protocol
	if p == "" {
		for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
			if v := getenv(name); v != "" {
				p = v
				break
			}
		}
	}
	switch strings.ToLower(p) {
	case "", "http", "http/protobuf":
		return "http", nil
	case "grpc":
		return "grpc", nil
	}
	return "", fmt.Errorf("--tracing-protocol %q: want http or grpc", p)
}

// newTracerProvider returns the SDK provider exporting spans over OTLP in
// batches, or nil when tracing is off. Its Shutdown flushes them.
func newTracerProvider(ctx context.Context, t *tracingFlags, getenv func(string) string) (*sdktrace.TracerProvider, error) {
	if !t.on() {
		return nil, nil
	}
	if t.samplingRate < 0 || t.samplingRate > 1 {
		return nil, fmt.Errorf("--tracing-sampling-rate %v: want a ratio in [0, 1]", t.samplingRate)
	}
	proto, err := t.otlpProtocol(getenv)
	if err != nil {
		return nil, err
	}
	endpoint := t.endpoint
	if endpoint != "" && !strings.Contains(endpoint, "://") {
		endpoint = "http://" + endpoint
	}
	var client otlptrace.Client
	switch proto {
	case "grpc":
		var opts []otlptracegrpc.Option
		if endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
		}
		client = otlptracegrpc.NewClient(opts...)
	default:
		var opts []otlptracehttp.Option
		if endpoint != "" {
			// As OTEL_EXPORTER_OTLP_ENDPOINT: a base URL gets the traces path.
			if _, rest, _ := strings.Cut(endpoint, "://"); !strings.Contains(strings.TrimSuffix(rest, "/"), "/") {
				endpoint = strings.TrimSuffix(endpoint, "/") + "/v1/traces"
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
		}
		client = otlptracehttp.NewClient(opts...)
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.instance.id", t.instanceID)}
	if t.instanceID == "" {
		attrs[0] = attribute.String("service.instance.id", randomUUID())
	}
	if t.serviceName != "" || getenv("OTEL_SERVICE_NAME") == "" {
		name := t.serviceName
		if name == "" {
			name = "floodgate"
		}
		attrs = append(attrs, attribute.String("service.name", name))
	}
	if t.serviceNamespace != "" {
		attrs = append(attrs, attribute.String("service.namespace", t.serviceNamespace))
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	return sdktrace.NewTracerProvider(
		// A caller's sampling decision is followed; the traces this server
		// starts are sampled at the rate.
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.samplingRate))),
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
	), nil
}

// randomUUID returns a random (version 4) UUID, the default instance ID as
// envoyproxy/ratelimit's.
func randomUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
