package httplimit

import (
	"fmt"
	"net/http"
	"time"

	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/ratelimit/fallback"
)

// Option configures a Middleware. Options are applied in order; when two set
// the same thing, the last wins. An invalid option makes New and
// NewConcurrency return an error that names it.
type Option func(*config)

// FailurePolicy says what the middleware does with a request when the
// limiter's store fails (Redis unreachable, timed out, a script error).
type FailurePolicy int

const (
	// FailOpen serves the request without limiting it, and without
	// rate-limit headers. It is the default: a limiter protects capacity,
	// and an outage of its store should not turn into an outage of every
	// service behind it (Envoy's rate-limit filter and envoyproxy/ratelimit
	// behave the same unless told to deny).
	FailOpen FailurePolicy = iota
	// FailClosed answers 503 Service Unavailable without calling the
	// handler: for limits that guard something more precious than
	// availability, such as a paid API or a login endpoint.
	FailClosed
)

// String returns the name of the policy's constant.
func (p FailurePolicy) String() string {
	switch p {
	case FailOpen:
		return "FailOpen"
	case FailClosed:
		return "FailClosed"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

// HeaderSet selects the rate-limit header fields the middleware writes; the
// values combine with |, and 0 writes none (Retry-After on 429 is always
// written).
type HeaderSet uint8

const (
	// IETF writes the fields of draft-ietf-httpapi-ratelimit-headers-10:
	//
	//	RateLimit-Policy: "permin";q=50;w=60
	//	RateLimit: "permin";r=49;t=60
	//
	// The policy is the binding rule's Named name, or "default". q is
	// Result.Limit; w, the window in seconds, is written when known (see
	// PolicyWindow); r is Result.Remaining; t is Result.ResetAfter in
	// seconds, rounded up. For a ConcurrencyLimiter the policy has
	// qu="concurrent-requests" and neither w nor t.
	IETF HeaderSet = 1 << iota
	// Draft03 writes the fields of the earlier drafts (up to -03):
	// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset, the last in
	// seconds, rounded up (not for a ConcurrencyLimiter).
	Draft03
	// XRateLimit writes X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset with the values of Draft03. X-RateLimit-Reset is a
	// number of seconds from now, not a Unix time as in GitHub's API.
	XRateLimit

	allHeaders = IETF | Draft03 | XRateLimit
)

type config struct {
	key            func(*http.Request) (string, error)
	headers        HeaderSet
	window         time.Duration   // PolicyWindow; 0: unknown
	windows        []time.Duration // PolicyWindows, by rule index
	problem        bool
	failure        FailurePolicy
	onError        func(*http.Request, error)
	onDecision     func(*http.Request, ratelimit.Result)
	dryRun         bool
	skip           func(*http.Request) bool
	passNoKey      bool
	deny           func(http.ResponseWriter, *http.Request, ratelimit.Result)
	releaseTimeout time.Duration
	fallback       *fallback.Limiter
	err            error
}

// DefaultReleaseTimeout is the default of ReleaseTimeout.
const DefaultReleaseTimeout = time.Second

func newConfig(opts []Option) (config, error) {
	c := config{
		headers:        IETF,
		failure:        FailOpen,
		releaseTimeout: DefaultReleaseTimeout,
	}
	c.key, _ = ipKey(nil)
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c, c.err
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("httplimit: "+format, args...)
	}
}

// HeaderStyle selects the rate-limit header fields written on every response
// the middleware decided, allowed or denied (default IETF). For example
// HeaderStyle(IETF | XRateLimit) writes both forms, and HeaderStyle(0) none.
func HeaderStyle(h HeaderSet) Option {
	return func(c *config) {
		if h&^allHeaders != 0 {
			c.fail("HeaderStyle: unknown header set %#x", uint8(h))
			return
		}
		c.headers = h
	}
}

// PolicyWindow sets the window w written in RateLimit-Policy, for every rule
// without its own entry in PolicyWindows. The middleware cannot see a
// Limiter's rules, so by default (0) w is left out, as the draft allows;
// WindowOf computes the window of a rule. It is rounded up to whole seconds
// and must be >= 0. A ConcurrencyLimiter has no window: it ignores this.
func PolicyWindow(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.fail("PolicyWindow must be >= 0, got %v", d)
			return
		}
		c.window = d
	}
}

// PolicyWindows sets the window w of RateLimit-Policy for each rule of a
// multi-rule Limiter, in the order the rules were given to ratelimit.New
// (Result.Rule is the index). A 0 entry, or a rule beyond the list, falls
// back to PolicyWindow. Entries must be >= 0, and New fails when there are
// more entries than rules.
//
//	httplimit.PolicyWindows(time.Second, time.Minute) // for "persec" and "permin"
func PolicyWindows(ws ...time.Duration) Option {
	return func(c *config) {
		for i, d := range ws {
			if d < 0 {
				c.fail("PolicyWindows[%d] must be >= 0, got %v", i, d)
				return
			}
		}
		c.windows = append([]time.Duration(nil), ws...)
	}
}

// ProblemJSON makes denied requests get an application/problem+json body
// (RFC 9457) of the problem type quota-exceeded that the RateLimit draft
// registers, naming the violated policy:
//
//	{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
//	 "title":"Request cannot be satisfied as assigned quota has been exceeded",
//	 "status":429,"violated-policies":["permin"]}
//
// and the middleware's 400 and 503 responses a problem of type about:blank.
// By default bodies are text/plain, "Too Many Requests" and so on.
func ProblemJSON() Option { return func(c *config) { c.problem = true } }

// DenyWith replaces the response to a denied request: f must write the
// status and body. The rate-limit fields and Retry-After are already set on
// w.Header() when f is called. The default writes 429 Too Many Requests (see
// ProblemJSON). f must be safe for concurrent use.
func DenyWith(f func(w http.ResponseWriter, r *http.Request, res ratelimit.Result)) Option {
	return func(c *config) {
		if f == nil {
			c.fail("DenyWith function is nil")
			return
		}
		c.deny = f
	}
}

// StoreFailure sets what happens to a request when the limiter's store
// fails: FailOpen (the default) or FailClosed. Either way the error goes to
// the OnError hook. In DryRun mode requests are always served.
func StoreFailure(p FailurePolicy) Option {
	return func(c *config) {
		if p != FailOpen && p != FailClosed {
			c.fail("StoreFailure must be FailOpen or FailClosed, got %v", p)
			return
		}
		c.failure = p
	}
}

// OnError sets a hook called with every error the middleware meets, on the
// request's goroutine, before the response is written:
//
//   - the request has no key (errors.Is(err, ErrNoKey)): empty, or the key
//     function failed (KeyByIP: a malformed forwarding header);
//   - the store failed (Redis down or slow): the request is then served or
//     refused as StoreFailure says;
//   - the request's context ended while deciding or during a LeakyBucket
//     delay (errors.Is(err, context.Canceled) when the client went away);
//   - releasing a concurrency slot failed (after the handler returned).
//
// The default does nothing. f must be safe for concurrent use.
func OnError(f func(r *http.Request, err error)) Option {
	return func(c *config) {
		if f == nil {
			c.fail("OnError function is nil")
			return
		}
		c.onError = f
	}
}

// OnDecision sets a hook called with every decision of the limiter, allowed
// or not, before the request is served, delayed or refused. With DryRun it
// is how denials are reported. f must be safe for concurrent use.
func OnDecision(f func(r *http.Request, res ratelimit.Result)) Option {
	return func(c *config) {
		if f == nil {
			c.fail("OnDecision function is nil")
			return
		}
		c.onDecision = f
	}
}

// DryRun makes the middleware decide, consume, report (OnDecision, OnError)
// and write the rate-limit header fields as usual, but never refuse or delay
// a request: denied requests, requests without a key and requests met by a
// store failure are all served. Use it to try a limit on live traffic (as
// nginx's limit_req_dry_run).
func DryRun() Option { return func(c *config) { c.dryRun = true } }

// Skip exempts the requests for which f returns true (health checks, say):
// they are served without consulting the limiter and without rate-limit
// fields. By default no request is exempt. f must be safe for concurrent use.
func Skip(f func(r *http.Request) bool) Option {
	return func(c *config) {
		if f == nil {
			c.fail("Skip function is nil")
			return
		}
		c.skip = f
	}
}

// PassWithoutKey serves requests that have no key (see ErrNoKey) without
// limiting them. The default answers them 400 Bad Request, since a client
// that can make its key disappear (omit a header) would otherwise escape the
// limit; choose PassWithoutKey when a later handler refuses keyless requests
// anyway or when only identified clients are to be limited. It applies only
// to a key that is missing: a key of any length is limited (see Keys in the
// package doc).
func PassWithoutKey() Option { return func(c *config) { c.passNoKey = true } }

// ReleaseTimeout bounds how long giving a concurrency slot back may take
// after the handler returned (default DefaultReleaseTimeout). The release
// runs before the response is complete, so it is kept short; a slot whose
// release failed frees itself when its lease ends. It must be > 0. A
// Limiter ignores it.
func ReleaseTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("ReleaseTimeout must be > 0, got %v", d)
			return
		}
		c.releaseTimeout = d
	}
}

// Fallback decides with f, a fallback.Limiter around the Limiter given to
// New (New fails otherwise), so that a store failure is answered as f's
// Mode says: Degraded decides in process on this process's share of each
// rule (see package ratelimit/fallback for the bound), Allow serves, Deny
// refuses, and Error leaves the failure to StoreFailure. A request the
// fallback decided is answered like any other: the rate-limit fields (left
// out when its Result.Limit is 0, as for Allow and Deny, which know no
// quota), Retry-After and 429 when refused; OnDecision sees its Result with
// Fallback set. Bound f's store calls with its Options.Timeout: a request
// waits for a failing call before the fallback answers. A
// ConcurrencyLimiter ignores this option.
func Fallback(f *fallback.Limiter) Option {
	return func(c *config) {
		if f == nil {
			c.fail("Fallback limiter is nil")
			return
		}
		c.fallback = f
	}
}
