package server

import (
	"context"
	"net/http"
	"time"

	"github.com/floodgate-dev/floodgate/server/internal/api"
	"github.com/floodgate-dev/floodgate/server/internal/auth"
	"github.com/floodgate-dev/floodgate/server/internal/dashboard"
)

// The transports (package server/internal/api): Envoy's RLS over gRPC and
// the HTTP API, over a Service.

// DefaultMaxBodyBytes bounds the body of an HTTP request.
const DefaultMaxBodyBytes = api.DefaultMaxBodyBytes

// TooLargeError is a request body over the size limit: HTTP answers it
// with 413.
type TooLargeError = api.TooLargeError

// HTTPOptions configure the HTTP API.
type HTTPOptions struct {
	// Token, when set, is required as "Authorization: Bearer <token>" on
	// every path but /healthz, /healthcheck and /readyz.
	Token        string
	MaxBodyBytes int64 // DefaultMaxBodyBytes when 0

	auth    *auth.Authenticator  // Server's, with its tokens file; Token's when nil
	dash    *dashboard.Dashboard // Server's; serves /ui
	healthy func() bool          // Server's; answers /healthcheck (always healthy when nil)
}

// NewHTTPHandler returns the HTTP API of s:
//
//	POST /json      Envoy's RateLimitRequest as protojson → RateLimitResponse; 200 OK, 429 OVER_LIMIT
//	POST /v1/check  {"domain": "d", "descriptors": [{"key": "value", ...}], "cost": 1} → decision; 200 or 429
//	GET  /healthz   200 while the process serves
//	GET  /healthcheck  envoyproxy/ratelimit's: 200 "OK" while healthy (not shutting down; see Server.Healthy), else 500
//	GET  /readyz    200 when a configuration is loaded and the store is not failing as a whole; else 503
//	GET  /metrics   Prometheus metrics (when s has Metrics)
//
// Malformed requests get 400 with a message naming the problem, bodies over
// MaxBodyBytes 413; an unavailable store (failure mode "error") gets 503.
//
// The POST endpoints refuse what only a browser on another site would send,
// so that a page cannot spend budgets through its visitors' browsers (CSRF),
// token or not: a cross-origin request (Sec-Fetch-Site or Origin, as
// net/http's CrossOriginProtection judges it) gets 403, and a text/plain or
// multipart/form-data body 415. Clients such as curl that send neither
// header are unaffected; curl's default form type is accepted.
func NewHTTPHandler(s *Service, o HTTPOptions) http.Handler {
	ao := s.apiOptions()
	ao.Auth, ao.MaxBodyBytes, ao.Dashboard, ao.Healthy = o.auth, o.MaxBodyBytes, o.dash, o.healthy
	if ao.Auth == nil {
		ao.Auth = auth.NewAuthenticator(o.Token, false)
	}
	if m := s.opts.Metrics; m != nil {
		ao.Metrics = m.Handler()
	}
	return api.NewHTTP(apiCore{s}, ao)
}

// RLS serves Envoy's rate limit service, envoy.service.ratelimit.v3, from a
// Service. Register it with rls.RegisterRateLimitServiceServer; Server
// registers it with a hand-written codec instead (package rlswire), which
// gives the same answers for less CPU.
type RLS = api.RLS

// NewRLS returns the gRPC service of s.
func NewRLS(s *Service) *RLS { return api.NewRLS(apiCore{s}, s.apiOptions()) }

// BearerOK reports whether an Authorization value carries token as a bearer
// credential. The scheme is matched case-insensitively (RFC 9110 §11.1), the
// token in constant time; surrounding spaces are ignored.
func BearerOK(header, token string) bool { return auth.BearerOK(header, token) }

// apiOptions are the transports' options that s decides: envoy's forms,
// dynamic metadata, the tracer and the request counts.
func (s *Service) apiOptions() api.Options {
	o := api.Options{
		Envoy:           s.opts.Envoy.Enabled,
		DynamicMetadata: s.envoyDynamicMetadataOn(),
		Tracer:          s.tracer,
	}
	if m := s.opts.Metrics; m != nil {
		o.Meter = meter{m}
	}
	return o
}

// apiCore is a Service as the transports' api.Core.
type apiCore struct{ s *Service }

func (c apiCore) Decide(ctx context.Context, req *Request) (*Response, error) {
	if req != nil { // a nil request is refused as input by Decide
		if err := c.s.authorize(ctx, req.Domain); err != nil {
			return nil, err
		}
	}
	return c.s.Decide(ctx, req)
}

func (c apiCore) Readiness() (bool, string) {
	if !c.s.Ready() {
		return false, c.s.notReadyReason()
	}
	return true, c.s.partialOutage()
}

// meter is Metrics as the transports' api.Meter.
type meter struct{ m *Metrics }

func (m meter) Request(api, code string, took time.Duration) { m.m.request(api, code, took) }
func (m meter) Refused(api, code string)                     { m.m.requests.WithLabelValues(api, code).Inc() }
