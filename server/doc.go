// Package server is floodgate's decision service: it answers rate limit
// requests against a configuration of envoyproxy/ratelimit's YAML (see
// package config) with every floodgate algorithm, on the in-process memory
// backend or on Redis.
//
// Service decides requests independently of any API. Its core (decide.go)
// matches the descriptors, decides the limited ones on the stores (the
// local over-limit cache first), decides the shadow-mode ones on their own
// and records the answer. What envoy compatibility (Options.Envoy) changes
// is fixed by NewService: how the core counts (each descriptor on its own,
// spending past the limit), an observer of its decisions (envoy's StatsD
// statistics) and a front around it (envoy's request checks, texts and
// answer's form); the core has no envoy branch. RLS serves it as
// Envoy's rate limit service (envoy.service.ratelimit.v3, gRPC), RLQS as
// Envoy's rate limit quota service (envoy.service.rate_limit_quota.v3: each
// data plane's share of a limit, sized from the fleet's reported demand) and
// NewHTTPHandler over HTTP (POST /json with Envoy's messages in protojson,
// POST /v1/check with friendly JSON, /healthz, /readyz, /metrics). Server ties
// them together with configuration reloads (files, or package xds), TLS,
// bearer-token auth and graceful shutdown; package storeurl opens the store
// a URL names; `floodgate serve` runs it.
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
