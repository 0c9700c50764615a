package httplimit

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/ratelimit"
)

// Names and values of the responses.
const (
	// ProblemType is the problem type of a denied request's
	// application/problem+json body (see ProblemJSON), registered by the
	// RateLimit header fields draft.
	ProblemType = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	// DefaultPolicyName is the IETF policy name of a rule that is not Named.
	DefaultPolicyName = "default"
)

const quotaExceededTitle = "Request cannot be satisfied as assigned quota has been exceeded"

// WindowOf returns the window of rule r for PolicyWindow: the Window of a
// FixedWindow, SlidingWindow or SlidingLog, and for the bucket rules the
// time their quota (Result.Limit) takes to refill from empty:
// Capacity·Every/Refill for a TokenBucket, Burst·Per/Rate for a GCRA and
// (Burst+1)·Per/Rate for a LeakyBucket. It returns 0 for other rules,
// including ones wrapped by ratelimit.Named, whose parts it cannot see: pass
// WindowOf of the unwrapped rule instead.
func WindowOf(r ratelimit.Rule) time.Duration {
	switch r := r.(type) {
	case ratelimit.FixedWindow:
		return r.Window
	case *ratelimit.FixedWindow:
		return WindowOf(*r)
	case ratelimit.SlidingWindow:
		return r.Window
	case *ratelimit.SlidingWindow:
		return WindowOf(*r)
	case ratelimit.SlidingLog:
		return r.Window
	case *ratelimit.SlidingLog:
		return WindowOf(*r)
	case ratelimit.TokenBucket:
		return refill(r.Capacity, r.Every, r.Refill)
	case *ratelimit.TokenBucket:
		return WindowOf(*r)
	case ratelimit.GCRA:
		return refill(r.Burst, r.Per, r.Rate)
	case *ratelimit.GCRA:
		return WindowOf(*r)
	case ratelimit.LeakyBucket:
		return refill(r.Burst+1, r.Per, r.Rate)
	case *ratelimit.LeakyBucket:
		return WindowOf(*r)
	}
	return 0
}

// refill returns n·per/rate, 0 for invalid parameters, saturating at the
// largest Duration.
func refill(n int64, per time.Duration, rate int64) time.Duration {
	if n <= 0 || per <= 0 || rate <= 0 {
		return 0
	}
	f := float64(n) * float64(per) / float64(rate)
	if f >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(f)
}

// ceilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// policyName returns the IETF policy name of res's binding rule.
func policyName(res ratelimit.Result) string {
	if res.RuleName == "" {
		return DefaultPolicyName
	}
	return res.RuleName
}

// sfString encodes s as a Structured Field String (RFC 8941 section 3.3.3):
// quoted, with " and \ escaped. Bytes outside printable ASCII, which a String
// cannot hold, become "?".
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < ' ' || c > '~':
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// window returns the policy window for the binding rule of res, 0 when
// unknown.
func (m *Middleware) window(res ratelimit.Result) time.Duration {
	if m.conc != nil {
		return 0
	}
	if res.Rule >= 0 && res.Rule < len(m.c.windows) && m.c.windows[res.Rule] > 0 {
		return m.c.windows[res.Rule]
	}
	return m.c.window
}

// setHeaders writes the rate-limit fields of res that m.c.headers selects.
func (m *Middleware) setHeaders(h http.Header, res ratelimit.Result) {
	if m.c.headers == 0 || res.Fallback && res.Limit == 0 {
		return // none, or a fallback answer that knows no quota
	}
	limit := strconv.FormatInt(max(res.Limit, 0), 10)
	remaining := strconv.FormatInt(max(res.Remaining, 0), 10)
	reset := strconv.FormatInt(ceilSeconds(res.ResetAfter), 10)
	if m.c.headers&IETF != 0 {
		name := sfString(policyName(res))
		policy := name + ";q=" + limit
		state := name + ";r=" + remaining
		if m.conc != nil {
			policy += `;qu="concurrent-requests"`
		} else {
			if w := m.window(res); w > 0 {
				policy += ";w=" + strconv.FormatInt(ceilSeconds(w), 10)
			}
			state += ";t=" + reset
		}
		h.Set("RateLimit-Policy", policy)
		h.Set("RateLimit", state)
	}
	for _, prefix := range [...]struct {
		on     HeaderSet
		prefix string
	}{{Draft03, "RateLimit-"}, {XRateLimit, "X-RateLimit-"}} {
		if m.c.headers&prefix.on == 0 {
			continue
		}
		h.Set(prefix.prefix+"Limit", limit)
		h.Set(prefix.prefix+"Remaining", remaining)
		if m.conc == nil {
			h.Set(prefix.prefix+"Reset", reset)
		}
	}
}

// deny writes the response to a denied request; the rate-limit fields are
// set.
func (m *Middleware) deny(w http.ResponseWriter, r *http.Request, res ratelimit.Result) {
	// A concurrency denial's RetryAfter is when the oldest lease expires: an
	// upper bound far beyond the usual wait, so no Retry-After is sent (as
	// nginx's limit_conn).
	if res.RetryAfter >= 0 && m.conc == nil {
		w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(res.RetryAfter), 10))
	}
	if m.c.deny != nil {
		m.c.deny(w, r, res)
		return
	}
	if !m.c.problem {
		http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
		return
	}
	writeJSON(w, http.StatusTooManyRequests, struct {
		Type     string   `json:"type"`
		Title    string   `json:"title"`
		Status   int      `json:"status"`
		Violated []string `json:"violated-policies"`
	}{ProblemType, quotaExceededTitle, http.StatusTooManyRequests, []string{policyName(res)}})
}

// fail writes the middleware's own error responses, 400 and 503.
func (m *Middleware) fail(w http.ResponseWriter, status int, detail string) {
	if !m.c.problem {
		http.Error(w, http.StatusText(status), status)
		return
	}
	writeJSON(w, status, struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail,omitempty"`
	}{"about:blank", http.StatusText(status), status, detail})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
