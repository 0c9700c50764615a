package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-dev/floodgate/server/checkapi"
	"github.com/floodgate-dev/floodgate/server/decision"
	"github.com/floodgate-dev/floodgate/server/envoy"
	"github.com/floodgate-dev/floodgate/server/internal/auth"
	"github.com/floodgate-dev/floodgate/server/internal/rlswire"
	"github.com/floodgate-dev/floodgate/server/internal/tracing"
)

// NewHTTP returns the HTTP API of core:
//
//	POST /json      Envoy's RateLimitRequest as protojson → RateLimitResponse; 200 OK, 429 OVER_LIMIT
//	POST /v1/check  {"domain": "d", "descriptors": [{"key": "value", ...}], "cost": 1} → decision; 200 or 429
//	GET  /healthz   200 while the process serves
//	GET  /healthcheck  envoyproxy/ratelimit's: 200 "OK" while healthy (not shutting down; see Server.Healthy), else 500
//	GET  /readyz    200 when a configuration is loaded and the store is not failing as a whole; else 503
//	GET  /metrics   Prometheus metrics (Options.Metrics)
//	GET  /ui        the dashboard (Options.Dashboard)
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
func NewHTTP(core Core, o Options) http.Handler {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	h := &httpAPI{core: core, o: o, cop: http.NewCrossOriginProtection()}
	h.jsonError = h.error
	if o.Envoy {
		h.jsonError = h.envoyJSONError
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /json", h.auth(h.post(h.json)))
	mux.HandleFunc("POST /v1/check", h.auth(h.post(h.check)))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, _ *http.Request) {
		// As envoyproxy/ratelimit's: 200 "OK", or 500 with no body.
		if o.Healthy != nil && !o.Healthy() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "OK")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready, msg := core.Readiness()
		if !ready {
			http.Error(w, "not ready: "+msg, http.StatusServiceUnavailable)
			return
		}
		if msg != "" {
			// A partial outage: the other keys are decided as usual.
			fmt.Fprintf(w, "ok; %s\n", msg)
			return
		}
		io.WriteString(w, "ok\n")
	})
	if o.Metrics != nil {
		mux.HandleFunc("GET /metrics", h.auth(h.everyDomain(o.Metrics.ServeHTTP)))
	}
	if o.Dashboard != nil {
		o.Dashboard.Routes(mux, func(next http.HandlerFunc) http.HandlerFunc { return h.auth(h.everyDomain(next)) })
	}
	return mux
}

type httpAPI struct {
	core Core
	o    Options
	cop  *http.CrossOriginProtection
	// jsonError answers POST /json's errors: h.error, or envoy's form
	// (envoyJSONError) in envoy compatibility mode; chosen once.
	jsonError func(http.ResponseWriter, error) string
}

// post refuses cross-origin browser requests (403) and bodies that a
// cross-site form or script could send without a CORS preflight and that
// cannot be JSON (415).
func (h *httpAPI) post(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		status, msg := 0, ""
		if err := h.cop.Check(r); err != nil {
			status, msg = http.StatusForbidden, "cross-origin requests are refused: "+err.Error()
		} else if ct := r.Header.Get("Content-Type"); ct != "" {
			mt, _, err := mime.ParseMediaType(ct)
			if err != nil || mt == "text/plain" || mt == "multipart/form-data" {
				status, msg = http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: send the body as application/json", ct)
			}
		}
		if status != 0 {
			if m := h.o.Meter; m != nil {
				m.Refused(apiOf(r), "invalid")
			}
			http.Error(w, msg, status)
			return
		}
		next(w, r)
	}
}

// auth checks the bearer token when tokens are required, and gives next
// the token's scope in the request's context (auth.From): the decisions
// check it against the domain.
func (h *httpAPI) auth(next http.HandlerFunc) http.HandlerFunc {
	if !h.o.Auth.Enabled() {
		return next
	}
	return func(w http.ResponseWriter, r *http.Request) {
		s, ok := h.o.Auth.Check(r.Header.Get("Authorization"))
		if !ok {
			if m := h.o.Meter; m != nil {
				m.Refused(apiOf(r), "unauthorized")
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate"`)
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		next(w, r.WithContext(auth.With(r.Context(), s)))
	}
}

// everyDomain lets through only tokens of every domain: for the paths that
// show every domain's figures (metrics, the dashboard). It runs after auth.
func (h *httpAPI) everyDomain(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s := auth.From(r.Context()); !s.Unlimited() {
			if m := h.o.Meter; m != nil {
				m.Refused(apiOf(r), "forbidden")
			}
			http.Error(w, fmt.Sprintf("the token %q may use only some domains; this path shows every domain", s.Name), http.StatusForbidden)
			return
		}
		next(w, r)
	}
}

func apiOf(r *http.Request) string {
	switch r.URL.Path {
	case "/json":
		return "json"
	case "/v1/check":
		return "check"
	}
	return "metrics"
}

// body reads a request body within the size limit.
func (h *httpAPI) body(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.o.MaxBodyBytes))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, &TooLargeError{Limit: h.o.MaxBodyBytes}
	}
	if err != nil {
		// The connection's error names internal addresses: say what
		// happened instead.
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, &bodyError{timeout: true}
		}
		return nil, &bodyError{}
	}
	return data, nil
}

// bodyError is a request body that could not be read: HTTP answers 408 when
// it did not arrive within the read timeout, else 400.
type bodyError struct{ timeout bool }

func (e *bodyError) Error() string {
	if e.timeout {
		return "the request body did not arrive within the read timeout"
	}
	return "the request body could not be read"
}

func (h *httpAPI) json(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	code := h.traceHTTP(tracing.SpanJSON, w, r, h.serveJSON)
	if m := h.o.Meter; m != nil {
		m.Request("json", code, time.Since(start))
	}
}

func (h *httpAPI) serveJSON(w http.ResponseWriter, r *http.Request) string {
	return h.decideJSON(w, r, h.jsonError)
}

// decideJSON answers POST /json, its errors through fail.
func (h *httpAPI) decideJSON(w http.ResponseWriter, r *http.Request, fail func(http.ResponseWriter, error) string) string {
	data, err := h.body(w, r)
	if err != nil {
		return fail(w, err)
	}
	var req rls.RateLimitRequest
	if err := protojson.Unmarshal(data, &req); err != nil {
		return fail(w, &decision.InputError{Msg: fmt.Sprintf("request is not a RateLimitRequest in protojson: %v", err)})
	}
	in, err := rlswire.FromProto(&req)
	if err != nil {
		return fail(w, err)
	}
	out, err := h.core.Decide(h.o.Tracer.Request(r.Context(), in), in)
	if err != nil {
		return fail(w, err)
	}
	p := rlswire.ToProto(out)
	if h.o.DynamicMetadata {
		p.DynamicMetadata = envoy.DynamicMetadata(&req, out)
	}
	resp, err := protojson.Marshal(p)
	if err != nil {
		return fail(w, err)
	}
	w.Header().Set("Content-Type", "application/json")
	if out.Code == decision.CodeOverLimit {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(resp)
	return out.Code.String()
}

// error answers err and returns its metrics label.
func (h *httpAPI) error(w http.ResponseWriter, err error) string {
	kind := errorKind(err)
	http.Error(w, err.Error(), httpStatuses[kind])
	return codeLabel(kind)
}

// envoyJSONError answers an error of POST /json as envoyproxy/ratelimit does
// in envoy compatibility mode: 400 with the body "Bad Request" for a body it
// cannot read or parse and for every error of the service (no configuration,
// an empty domain, a failing store); a body over the size limit keeps 413 and
// the caller's own cancellation 503.
func (h *httpAPI) envoyJSONError(w http.ResponseWriter, err error) string {
	kind := errorKind(err)
	switch kind {
	case "too_large", "canceled", "deadline", "forbidden":
		return h.error(w, err)
	}
	http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
	return codeLabel(kind)
}

// httpStatuses maps an errorKind to an HTTP status.
var httpStatuses = map[string]int{
	"invalid":      http.StatusBadRequest,
	"too_large":    http.StatusRequestEntityTooLarge,
	"body_timeout": http.StatusRequestTimeout,
	"unavailable":  http.StatusServiceUnavailable,
	"canceled":     http.StatusServiceUnavailable,
	"deadline":     http.StatusServiceUnavailable,
	"error":        http.StatusInternalServerError,
	"envoy":        http.StatusBadRequest,
	"forbidden":    http.StatusForbidden,
}

func (h *httpAPI) check(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	code := h.traceHTTP(tracing.SpanCheck, w, r, h.serveCheck)
	if m := h.o.Meter; m != nil {
		m.Request("check", code, time.Since(start))
	}
}

func (h *httpAPI) serveCheck(w http.ResponseWriter, r *http.Request) string {
	data, err := h.body(w, r)
	if err != nil {
		return h.error(w, err)
	}
	cr, err := checkapi.Parse(data)
	if err != nil {
		return h.error(w, err)
	}
	in := &decision.Request{Domain: cr.Domain, Descriptors: make([]decision.Descriptor, len(cr.Descriptors))}
	cost := int64(1)
	if cr.Cost != nil {
		cost = *cr.Cost
	}
	for i, es := range cr.Descriptors {
		in.Descriptors[i] = decision.Descriptor{Entries: es, Cost: cost}
	}
	out, err := h.core.Decide(h.o.Tracer.Request(r.Context(), in), in)
	if err != nil {
		return h.error(w, err)
	}
	resp := checkapi.FromDecision(out)
	w.Header().Set("Content-Type", "application/json")
	if !resp.Allowed {
		if resp.RetryAfterMS > 0 {
			w.Header().Set("Retry-After", strconv.FormatInt((resp.RetryAfterMS+999)/1000, 10))
		}
		w.WriteHeader(http.StatusTooManyRequests)
	}
	json.NewEncoder(w).Encode(resp)
	return out.Code.String()
}

// traceHTTP runs serve, which answers r and returns its metrics code label,
// under a server span (with tracing on), the child of the trace context in
// r's headers.
func (h *httpAPI) traceHTTP(name string, w http.ResponseWriter, r *http.Request, serve func(http.ResponseWriter, *http.Request) string) string {
	t := h.o.Tracer
	if t == nil {
		return serve(w, r)
	}
	ctx, span := t.Server(r.Context(), name, propagation.HeaderCarrier(r.Header),
		attribute.String("http.request.method", r.Method),
		attribute.String("url.path", r.URL.Path))
	code := serve(w, r.WithContext(ctx))
	switch code {
	case decision.CodeOK.String(), decision.CodeOverLimit.String():
	default:
		tracing.Fail(span, code)
	}
	tracing.End(span, code, nil)
	return code
}
