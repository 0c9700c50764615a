// Package decision is the model of a rate limit decision that floodgate's
// server and its adapters share: a Request of descriptors, and the
// Response, one Status per descriptor, with the codes of Envoy RLS v3. It
// holds no behaviour: package server decides, and package envoy shapes an
// answer as envoyproxy/ratelimit would.
package decision

import (
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/config"
)

// Code is the verdict of a request or of one descriptor; its values are those
// of Envoy RLS v3 RateLimitResponse.Code.
type Code int32

// The codes of Envoy RLS v3.
const (
	CodeUnknown   Code = 0
	CodeOK        Code = 1
	CodeOverLimit Code = 2
)

// String returns the Envoy enum name.
func (c Code) String() string {
	switch c {
	case CodeOK:
		return "OK"
	case CodeOverLimit:
		return "OVER_LIMIT"
	}
	return "UNKNOWN"
}

// Request is one rate limit request, independent of the API it came over.
type Request struct {
	Domain      string
	Descriptors []Descriptor
}

// Descriptor is one descriptor of a Request.
type Descriptor struct {
	Entries []config.Entry
	// Cost is the number of units the descriptor consumes: Envoy's
	// hits_addend. 0 peeks: the status is reported, nothing is consumed.
	Cost int64
	// Override, when set, is the descriptor's own limit (Envoy's
	// RateLimitDescriptor.limit); it applies instead of the configuration's
	// as long as the domain is configured. It is a fixed window.
	Override *Override
}

// Override is a limit carried by a request descriptor: RequestsPerUnit per
// period of UnitMultiplier Units (Envoy's RateLimitOverride), decided as a
// fixed window whose windows start at multiples of the period since the
// Unix epoch.
type Override struct {
	RequestsPerUnit uint32
	Unit            config.Unit
	// UnitMultiplier is the number of Units in the period; 0 means 1. The
	// period must be at most ratelimit.MaxPeriod.
	UnitMultiplier uint32
}

// Window is the override's period: the length of Unit times
// UnitMultiplier, as config.Limit.Window.
func (o *Override) Window() time.Duration {
	l := config.Limit{Unit: o.Unit, UnitMultiplier: o.UnitMultiplier}
	return l.Window()
}

// Response is the decision for a Request.
type Response struct {
	Code     Code     // OVER_LIMIT when any status is OVER_LIMIT
	Statuses []Status // one per descriptor, in request order
	// Failed reports that the store could not decide (an error, a timeout or
	// the circuit breaker): the codes are the failure mode's. With a
	// per-second store under FailOpen, they may be for the failing store's
	// descriptors only, the other store's being decided (see the server package).
	Failed bool
	// Headers are the response_headers_to_add of the answer: envoy
	// compatibility mode's RateLimit-Limit, -Remaining and -Reset
	// (envoy.Options.ResponseHeaders); nil otherwise.
	Headers []Header
	// ByFailureMode reports that the whole answer is the failure mode's:
	// no status was decided by a store (Failed is set too).
	ByFailureMode bool
	// Degraded reports that the store could not decide and the limits were
	// decided in process instead (FailDegraded), each on this server's
	// share; Failed and ByFailureMode are set too.
	Degraded bool
}

// Header is one header of Response.Headers.
type Header struct{ Key, Value string }

// Status is the decision for one descriptor.
type Status struct {
	Code Code
	// Limit is the limit the descriptor was decided under; nil when none
	// applies (the code is then OK).
	Limit *config.Limit
	// Remaining is what the limit has left after this request; MaxUint32 for
	// an unlimited limit.
	Remaining int64
	// RetryAfter is how long until the descriptor's own limit admits the
	// request again: 0 when it admits it now (even when another descriptor
	// of the request is over its limit), < 0 when its cost can never be
	// admitted.
	RetryAfter time.Duration
	// ResetAfter is how long until the limit is back to full.
	ResetAfter time.Duration
	// Shadow reports a limit in shadow mode that was exceeded: the code is
	// OK, the excess is counted in metrics.
	Shadow bool
}

// Observer sees the decisions of floodgate's core, for statistics kept
// outside it (package envoy's Observer counts envoyproxy/ratelimit's). Its
// methods run on the hot path: they must be quick and safe for concurrent
// use.
type Observer interface {
	// ConfigSet is told of every configuration made current.
	ConfigSet(cfg *config.Config)
	// Matched is told, once per request, the limit of each descriptor (nil
	// where none applies); known is false when the request's domain is not
	// configured. It returns the request's tally, or nil.
	Matched(req *Request, limits []*config.Limit, known bool) Tally
	// StoreFailed is told of every store failure.
	StoreFailed()
}

// Tally is an Observer's record of one request.
type Tally interface {
	// Decided is told of descriptor i's decision r, under limit l at a cost
	// of cost; cached when the local over-limit cache found it over its
	// limit without asking the store.
	Decided(i int, l *config.Limit, cost int64, r ratelimit.Result, cached bool)
}

// InputError is a malformed request: the transports answer it with 400 or
// InvalidArgument.
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

// ErrUnavailable is the error of a decision in the FailError mode when the
// store cannot decide.
var ErrUnavailable = errors.New("rate limit store unavailable")

// FailureMode says how the server answers when the store cannot decide.
type FailureMode int

// The failure modes.
const (
	// FailOpen answers OK to every descriptor (the default): a store outage
	// does not take the protected service down.
	FailOpen FailureMode = iota
	// FailClosed answers OVER_LIMIT to every descriptor that has a limit.
	FailClosed
	// FailError answers with an error (server.ErrUnavailable), so that
	// the caller (Envoy's failure_mode_deny) decides.
	FailError
	// FailDegraded keeps limiting in process: each server decides its
	// share of every limit (the limit divided by the live servers),
	// starting from what the store last said, and the store counts what
	// was admitted when it is back (floodgate serve's default; package
	// internal/degraded states the bounds).
	FailDegraded
)

// ParseFailureMode reads "degraded", "allow", "deny" or "error".
func ParseFailureMode(s string) (FailureMode, error) {
	switch s {
	case "allow", "open":
		return FailOpen, nil
	case "deny", "closed":
		return FailClosed, nil
	case "error":
		return FailError, nil
	case "degraded":
		return FailDegraded, nil
	}
	return 0, fmt.Errorf("failure mode %q: want degraded, allow, deny or error", s)
}

func (m FailureMode) String() string {
	switch m {
	case FailClosed:
		return "deny"
	case FailError:
		return "error"
	case FailDegraded:
		return "degraded"
	}
	return "allow"
}
