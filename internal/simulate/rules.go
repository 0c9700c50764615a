package simulate

import (
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/ratelimit"
)

// info is what the simulator knows of a rule.
type info struct {
	algorithm string        // one of Algorithms
	params    string        // the rule as Go
	limit     int64         // requests per window
	window    time.Duration // the rule's period
	bounds    []Bound
}

// The documented bounds, quoted from docs/algorithms.md ("Bound." of each
// rule) and the rule types' doc comments; ratelimit's TestBounds checks the
// same ones on random traffic.
const (
	docFixedAligned = `docs/algorithms.md, FixedWindow: "Limit per aligned window"`
	docFixedSpan    = `docs/algorithms.md, FixedWindow: "2·Limit in a span of one Window that straddles an edge"`
	docSliding      = `docs/algorithms.md, SlidingWindow: "Limit in any closed span of one Window"; ratelimit.SlidingWindow: "no span of Window ever admits more than Limit"`
	docLog          = `docs/algorithms.md, SlidingLog: "Limit in any span of one Window, exactly"; ratelimit.SlidingLog counts the span (now-Window, now]`
	docToken        = `docs/algorithms.md, TokenBucket: "In any span d: Capacity + Refill·d/Every"`
	docLeaky        = `docs/algorithms.md, LeakyBucket: "In any span d: Burst + 1 + Rate·d/Per admitted"`
	docLeakyServed  = `docs/algorithms.md, LeakyBucket: "Served (after their delays) at most Delay + 1 + Rate·d/Per", give or take the 1µs by which Result.Delay is rounded up`
	docGCRA         = `docs/algorithms.md, GCRA: "In any span d: Burst + Rate·d/Per"`
)

// describe returns what the simulator knows of r, one of the six rule types.
func describe(r ratelimit.Rule) (info, error) {
	switch r := r.(type) {
	case ratelimit.FixedWindow:
		return info{"fixed_window", fmt.Sprintf("FixedWindow{Limit: %d, Window: %s}", r.Limit, fmtDur(r.Window)), r.Limit, r.Window, []Bound{
			{Kind: PerAlignedWindow, Max: r.Limit, Span: r.Window, Doc: docFixedAligned},
			{Kind: InAnySpan, Max: 2 * r.Limit, Span: r.Window, Doc: docFixedSpan},
		}}, nil
	case ratelimit.SlidingWindow:
		buckets := r.Buckets
		if buckets == 0 {
			buckets = ratelimit.DefaultBuckets
		}
		return info{"sliding_window", fmt.Sprintf("SlidingWindow{Limit: %d, Window: %s, Buckets: %d}", r.Limit, fmtDur(r.Window), buckets), r.Limit, r.Window, []Bound{
			{Kind: InAnySpan, Max: r.Limit, Span: r.Window, Doc: docSliding},
		}}, nil
	case ratelimit.SlidingLog:
		return info{"sliding_log", fmt.Sprintf("SlidingLog{Limit: %d, Window: %s}", r.Limit, fmtDur(r.Window)), r.Limit, r.Window, []Bound{
			{Kind: InAnySpan, Max: r.Limit, Span: r.Window, Open: true, Doc: docLog},
		}}, nil
	case ratelimit.TokenBucket:
		return info{"token_bucket", fmt.Sprintf("TokenBucket{Capacity: %d, Refill: %d, Every: %s}", r.Capacity, r.Refill, fmtDur(r.Every)), r.Refill, r.Every, []Bound{
			{Kind: BurstPlusRate, Max: r.Capacity, Rate: r.Refill, Per: r.Every, Doc: docToken},
		}}, nil
	case ratelimit.LeakyBucket:
		delay := fmt.Sprint(r.Delay)
		if r.Delay == ratelimit.NoDelay {
			delay = "NoDelay"
		}
		bounds := []Bound{{Kind: BurstPlusRate, Max: r.Burst + 1, Rate: r.Rate, Per: r.Per, Doc: docLeaky}}
		if r.Delay != ratelimit.NoDelay {
			// Result.Delay is whole µs rounded up, so a served time may be up to
			// 1µs later than the exact one, and a span of served times up to
			// 1µs shorter than the exact span.
			bounds = append(bounds, Bound{Kind: BurstPlusRate, Max: r.Delay + 1, Rate: r.Rate, Per: r.Per, Served: true, Slack: time.Microsecond, Doc: docLeakyServed})
		}
		return info{"leaky_bucket", fmt.Sprintf("LeakyBucket{Rate: %d, Per: %s, Burst: %d, Delay: %s}", r.Rate, fmtDur(r.Per), r.Burst, delay), r.Rate, r.Per, bounds}, nil
	case ratelimit.GCRA:
		return info{"gcra", fmt.Sprintf("GCRA{Rate: %d, Per: %s, Burst: %d}", r.Rate, fmtDur(r.Per), r.Burst), r.Rate, r.Per, []Bound{
			{Kind: BurstPlusRate, Max: r.Burst, Rate: r.Rate, Per: r.Per, Doc: docGCRA},
		}}, nil
	case nil:
		return info{}, fmt.Errorf("rule is nil")
	}
	return info{}, fmt.Errorf("%T is not one of the six rules (%s); Named rules are not simulated, name the simulate.Rule instead", r, strings.Join(Algorithms, ", "))
}

// Options of NewRule; zero values take the server configuration's defaults.
type RuleOptions struct {
	Burst    int64 // token_bucket (Capacity), gcra: default Limit; leaky_bucket: default 0
	HasBurst bool  // Burst was given
	Delay    int64 // leaky_bucket: requests served without delay; ratelimit.NoDelay for nodelay
	Buckets  int   // sliding_window: 0 for ratelimit.DefaultBuckets
}

// NewRule builds the rule of algorithm (one of Algorithms) admitting limit
// requests per window, as the server's configuration maps requests_per_unit,
// unit, burst, delay and buckets (see config.Limit). It does not validate
// the rule: Run does.
func NewRule(algorithm string, limit int64, window time.Duration, o RuleOptions) (ratelimit.Rule, error) {
	capacity := limit
	if o.HasBurst {
		capacity = o.Burst
	}
	switch algorithm {
	case "fixed_window":
		return ratelimit.FixedWindow{Limit: limit, Window: window}, nil
	case "sliding_window":
		return ratelimit.SlidingWindow{Limit: limit, Window: window, Buckets: o.Buckets}, nil
	case "sliding_log":
		return ratelimit.SlidingLog{Limit: limit, Window: window}, nil
	case "token_bucket":
		return ratelimit.TokenBucket{Capacity: capacity, Refill: limit, Every: window}, nil
	case "leaky_bucket":
		return ratelimit.LeakyBucket{Rate: limit, Per: window, Burst: o.Burst, Delay: o.Delay}, nil
	case "gcra":
		return ratelimit.GCRA{Rate: limit, Per: window, Burst: capacity}, nil
	}
	return nil, fmt.Errorf("unknown algorithm %q (want %s)", algorithm, strings.Join(Algorithms, ", "))
}

// Describe returns a rule's algorithm name, its requests per window and its
// window, or an error when r is not one of the six rule types.
func Describe(r ratelimit.Rule) (algorithm string, limit int64, window time.Duration, err error) {
	in, err := describe(r)
	return in.algorithm, in.limit, in.window, err
}
