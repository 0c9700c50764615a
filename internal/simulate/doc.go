// Package simulate runs traffic through rate limiting rules on a fake clock and
// reports what each rule admitted: counts, the most admitted in any span of the
// rule's window, delays, and whether the bound that docs/algorithms.md
// documents for the rule held. It draws the result as a chart (offered and
// admitted requests over time, one panel per rule) with gonum.org/v1/plot.
//
// The rules run on backend.Memory with a clock.Fake that is set to each
// request's time before the request is decided, so a simulation is fast,
// needs no Redis, and gives the same result every time for the same input.
// The memory backend decides exactly as Redis does (the conformance suite of
// package ratelimit checks this), so what a simulation shows holds on Redis.
//
// Traffic comes from a Pattern (steady, bursty, boundary, ramp, poisson) or
// from a file read by ParseTraffic (a timestamp per line, or timestamp,key).
// Run decides it against every rule independently: each rule sees every
// request, and each key of the traffic has its own state in each rule.
//
// This package serves the floodgate simulate command; its API may change.
package simulate
