// Package server is floodgate's decision service: it answers rate limit
// requests against a configuration of envoyproxy/ratelimit's YAML (see
// package config) with every floodgate algorithm, on the in-process memory
// backend or on Redis.
//
// Service decides requests independently of any API. RLS serves it as
// Envoy's rate limit service (envoy.service.ratelimit.v3, gRPC), RLQS as
// Envoy's rate limit quota service (envoy.service.rate_limit_quota.v3: each
// data plane's share of a limit, sized from the fleet's reported demand) and
// NewHTTPHandler over HTTP (POST /json with Envoy's messages in protojson,
// POST /v1/check with friendly JSON, /healthz, /readyz, /metrics). Server ties
// them together with configuration reloads, TLS, bearer-token auth and
// graceful shutdown; `floodgate serve` runs it.
//
// # Semantics
//
// Statuses come in request order. A descriptor no limit matches is OK without
// a current limit; an unlimited one is OK with 4294967295 remaining; one in
// shadow mode is OK whatever its limit says, and counted in metrics. Every
// other descriptor of a request is decided in one atomic step where the store
// allows it (memory, standalone Redis, keys of one Cluster slot), so a request
// over any limit consumes nothing from the others — unlike
// envoyproxy/ratelimit, which counts it against every descriptor.
//
// A store call has a timeout (50 ms by default) and passes a circuit
// breaker, so that a dead Redis costs callers milliseconds; the failure mode
// (allow, deny or error) says what is answered meanwhile.
package server
