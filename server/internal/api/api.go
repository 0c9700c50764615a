// Package api is the decision server's front door over a decision core:
// Envoy's rate limit service over gRPC (RLS, with the hand-written wire
// codec of package rlswire), and the HTTP API (POST /json, POST /v1/check,
// health, readiness, metrics, the dashboard). It decides nothing: every
// request goes to the Core, and every answer and error is shaped here, in
// floodgate's form or, chosen once by Options.Envoy, envoyproxy/ratelimit's.
package api

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"time"

	"github.com/floodgate-dev/floodgate/server/decision"
	"github.com/floodgate-dev/floodgate/server/envoy"
	"github.com/floodgate-dev/floodgate/server/internal/auth"
	"github.com/floodgate-dev/floodgate/server/internal/dashboard"
	"github.com/floodgate-dev/floodgate/server/internal/tracing"
	"google.golang.org/grpc/codes"
)

// Core is the decision service the transports answer from.
type Core interface {
	// Decide decides one request; errors are a *decision.InputError, an
	// *envoy.Error, decision.ErrUnavailable, or the caller's context's.
	Decide(ctx context.Context, req *decision.Request) (*decision.Response, error)
	// Readiness reports whether the core decides (a configuration loaded,
	// the store not failing as a whole) and a note: why not, or, when
	// ready, the partial outage its stores are in ("" for none).
	Readiness() (ready bool, note string)
}

// Meter counts the requests the transports answer.
type Meter interface {
	// Request counts an answered request of api (grpc, json, check) by its
	// code label and how long it took.
	Request(api, code string, took time.Duration)
	// Refused counts a request refused before any decision (invalid,
	// unauthorized).
	Refused(api, code string)
}

// Options configure the transports; decided once, at start-up.
type Options struct {
	// Envoy selects envoyproxy/ratelimit's error codes (Unknown for its
	// service errors and for an unavailable store) and its POST /json
	// errors (400 "Bad Request").
	Envoy bool
	// DynamicMetadata sends envoy.DynamicMetadata on every RLS answer.
	DynamicMetadata bool
	// Tracer makes the spans; nil traces nothing.
	Tracer *tracing.Tracer
	// Meter counts requests; nil counts nothing.
	Meter Meter
	// Metrics, when set, is served at GET /metrics.
	Metrics http.Handler
	// Auth, when enabled, requires "Authorization: Bearer <token>" on
	// every HTTP path but /healthz, /healthcheck and /readyz, and puts the
	// token's scope in the request's context (auth.From); /metrics and the
	// dashboard, which show every domain, need a token of every domain.
	Auth *auth.Authenticator
	// MaxBodyBytes bounds an HTTP request body; DefaultMaxBodyBytes when 0.
	MaxBodyBytes int64
	// Dashboard, when set, serves /ui.
	Dashboard *dashboard.Dashboard
	// Healthy answers /healthcheck; always healthy when nil.
	Healthy func() bool
}

// DefaultMaxBodyBytes bounds the body of an HTTP request.
const DefaultMaxBodyBytes = 1 << 20

// TooLargeError is a request body over the size limit: HTTP answers it
// with 413.
type TooLargeError struct{ Limit int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("request body is larger than %d bytes", e.Limit)
}

// Label is the metrics' code label of an error of a request (codeLabel of
// its errorKind).
func Label(err error) string { return codeLabel(errorKind(err)) }

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
	"forbidden":   codes.PermissionDenied,
}

// envoyGRPCCodes is grpcCodes in envoy compatibility mode:
// envoyproxy/ratelimit returns its service and Redis errors as plain
// errors, which gRPC sends as Unknown.
var envoyGRPCCodes = func() map[string]codes.Code {
	m := maps.Clone(grpcCodes)
	m["unavailable"] = codes.Unknown
	return m
}()

// errorKind sorts an error of a request for the APIs' answers and the
// metrics' code label: invalid (an InputError), too_large (a TooLargeError), unavailable (the store, in
// the error failure mode), forbidden (an auth.DeniedError), canceled and
// deadline (the caller's context), or error.
func errorKind(err error) string {
	var ie *decision.InputError
	var tl *TooLargeError
	var be *bodyError
	var ee *envoy.Error
	var de *auth.DeniedError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &de):
		return "forbidden"
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
	case errors.Is(err, decision.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	return "error"
}
