package ratelimit

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"time"
)

// Rule is one limit: FixedWindow, SlidingWindow, SlidingLog, TokenBucket,
// LeakyBucket or GCRA, optionally wrapped by Named. Rules are plain values;
// New validates them.
type Rule interface {
	compile() (spec, error)
}

// NoDelay as LeakyBucket.Delay serves every admitted request at once: nginx's
// limit_req "nodelay".
const NoDelay int64 = -1

// maxExact bounds every intermediate integer of the scripts, which run in Lua's
// doubles: 2^53.
const maxExact = int64(1) << 53

// Limits on rule parameters that bound the work and memory of one call.
const (
	// MaxBuckets is the largest SlidingWindow.Buckets.
	MaxBuckets = 1000
	// MaxRules is the most rules of one Limiter.
	MaxRules = 1000
	// DefaultBuckets is SlidingWindow's number of sub-windows when Buckets is 0.
	DefaultBuckets = 10
	// MaxLogLimit is the largest SlidingLog.Limit: the log keeps one entry per
	// admitted unit.
	MaxLogLimit = 100000
	// MaxPeriod is the longest Window, Every or Per: ten years.
	MaxPeriod = 10 * 365 * 24 * time.Hour
)

// FixedWindow counts units in epoch-aligned windows [k·Window, (k+1)·Window)
// and admits while the count stays within Limit.
//
// Remaining is Limit minus the units counted in the current window. RetryAfter
// (when denied) is the time until the window ends. ResetAfter is the time until
// the window ends, or 0 when nothing is counted. A burst of up to 2·Limit can
// pass around a window edge; choose SlidingWindow or SlidingLog when that
// matters. Limit 0 denies everything.
type FixedWindow struct {
	Limit  int64
	Window time.Duration
}

// SlidingWindow counts units in Buckets sub-windows of Window/Buckets each and
// admits while the units of the current bucket and the Buckets before it stay
// within Limit. A unit counts from its admission until the end of the bucket
// that contains admission+Window, that is for between Window and
// Window+Window/Buckets, so no span of Window ever admits more than Limit.
//
// Remaining is Limit minus the units counted. RetryAfter is the time until
// enough old buckets leave the window. ResetAfter is the time until the newest
// counted bucket leaves it. Buckets 0 means DefaultBuckets; Window must be a
// whole multiple of Buckets microseconds. Limit 0 denies everything.
type SlidingWindow struct {
	Limit   int64
	Window  time.Duration
	Buckets int
}

// SlidingLog keeps the admission time of every unit and admits while the units
// admitted in the last Window (the span (now-Window, now]) stay within Limit.
// It is exact, at the cost of one log entry per admitted unit (Limit at most
// MaxLogLimit). Several SlidingLog rules of one Limiter share one log, such as
// 1 per second and 5 per minute.
//
// Remaining is Limit minus the units in the window. RetryAfter is the time
// until enough of the oldest entries leave the window. ResetAfter is the time
// until the newest entry leaves it. Limit 0 denies everything.
type SlidingLog struct {
	Limit  int64
	Window time.Duration
}

// TokenBucket holds up to Capacity tokens, refilled continuously at Refill
// tokens per Every; a request takes n tokens. The bucket starts full.
//
// Remaining is the whole tokens left after the call. RetryAfter is the time
// until n tokens are there. ResetAfter is the time until the bucket is full.
// Capacity 0 denies everything.
type TokenBucket struct {
	Capacity int64
	Refill   int64
	Every    time.Duration
}

// LeakyBucket is nginx's limit_req: requests fill a bucket that drains at Rate
// per Per; a request that would raise the excess over the steady rate above
// Burst is rejected and changes nothing. Admitted requests whose excess is over
// Delay are to be held for Result.Delay before they are served (traffic
// shaping); Delay NoDelay serves them at once (nginx "nodelay"), Delay 0 (the
// default, as in nginx) delays every request of a burst.
//
// Limit is Burst+1, the most requests admitted at once. Remaining is how many
// more could be admitted now. RetryAfter is the time until one more fits.
// ResetAfter is the time until the bucket is empty.
type LeakyBucket struct {
	Rate  int64
	Per   time.Duration
	Burst int64
	Delay int64
}

// GCRA is the generic cell rate algorithm with go-redis/redis_rate semantics:
// Rate requests per Per, with bursts of up to Burst requests. It keeps one
// timestamp per key (the theoretical arrival time).
//
// Remaining is how many more requests fit now. RetryAfter is the time until the
// request fits. ResetAfter is the time until the key is back to a full burst.
// Burst 0 denies everything.
type GCRA struct {
	Rate  int64
	Per   time.Duration
	Burst int64
}

// Named gives a rule a name, reported in Result.RuleName. Names take part in
// the rule's identity (see Limiter): the same rule under two names keeps two
// states.
func Named(name string, r Rule) Rule { return named{name: name, r: r} }

type named struct {
	name string
	r    Rule
}

// kind of a compiled rule; the numbers are part of the script protocol.
type kind int64

const (
	kindFixed   kind = 1
	kindSliding kind = 2
	kindLog     kind = 3
	kindDrain   kind = 4
)

// spec is a validated rule in the integer microsecond form both backends use.
type spec struct {
	kind  kind
	name  string
	limit int64 // reported Result.Limit

	window  int64 // fixed, sliding, log: µs
	buckets int64 // sliding
	bucket  int64 // sliding: µs per bucket

	capacity int64 // drain: in requests
	per      int64 // drain: µs
	rate     int64 // drain: requests per per
	delay    int64 // drain: delay threshold in requests, NoDelay for none
	full     int64 // drain: capacity × per, the level of a full bucket

	sid   string // what is counted: kind, grain and name (see stateID)
	field string // the rule's field in its Limiter's state
	tag   uint64 // the state of the rule on Memory (never 0)
}

func fieldErr(rule, field string, v any, want string) error {
	return fmt.Errorf("ratelimit: %s.%s must be %s, got %v", rule, field, want, v)
}

func micros(rule, field string, d time.Duration) (int64, error) {
	if d <= 0 {
		return 0, fieldErr(rule, field, d, "> 0")
	}
	if d > MaxPeriod {
		return 0, fieldErr(rule, field, d, "at most MaxPeriod (87600h)")
	}
	if d%time.Microsecond != 0 {
		return 0, fieldErr(rule, field, d, "a whole number of microseconds")
	}
	return int64(d / time.Microsecond), nil
}

func nonNegative(rule, field string, v int64) error {
	if v < 0 {
		return fieldErr(rule, field, v, ">= 0")
	}
	return nil
}

func (r FixedWindow) compile() (spec, error) {
	w, err := micros("FixedWindow", "Window", r.Window)
	if err != nil {
		return spec{}, err
	}
	if err := nonNegative("FixedWindow", "Limit", r.Limit); err != nil {
		return spec{}, err
	}
	if r.Limit >= maxExact {
		return spec{}, fieldErr("FixedWindow", "Limit", r.Limit, "< 2^53")
	}
	return spec{kind: kindFixed, limit: r.Limit, window: w}, nil
}

func (r SlidingWindow) compile() (spec, error) {
	w, err := micros("SlidingWindow", "Window", r.Window)
	if err != nil {
		return spec{}, err
	}
	if err := nonNegative("SlidingWindow", "Limit", r.Limit); err != nil {
		return spec{}, err
	}
	if r.Limit >= maxExact {
		return spec{}, fieldErr("SlidingWindow", "Limit", r.Limit, "< 2^53")
	}
	b := int64(r.Buckets)
	if b == 0 {
		b = DefaultBuckets
	}
	if b < 1 || b > MaxBuckets {
		return spec{}, fieldErr("SlidingWindow", "Buckets", r.Buckets, fmt.Sprintf("between 1 and %d (0 for %d)", MaxBuckets, DefaultBuckets))
	}
	if w%b != 0 {
		return spec{}, fieldErr("SlidingWindow", "Window", r.Window, fmt.Sprintf("a whole multiple of Buckets (%d) microseconds", b))
	}
	return spec{kind: kindSliding, limit: r.Limit, window: w, buckets: b, bucket: w / b}, nil
}

func (r SlidingLog) compile() (spec, error) {
	w, err := micros("SlidingLog", "Window", r.Window)
	if err != nil {
		return spec{}, err
	}
	if r.Limit < 0 || r.Limit > MaxLogLimit {
		return spec{}, fieldErr("SlidingLog", "Limit", r.Limit, fmt.Sprintf("between 0 and %d", MaxLogLimit))
	}
	return spec{kind: kindLog, limit: r.Limit, window: w}, nil
}

func drainSpec(rule string, rate, capacity int64, rateField, capField string, per time.Duration, perField string) (spec, error) {
	p, err := micros(rule, perField, per)
	if err != nil {
		return spec{}, err
	}
	if rate <= 0 {
		return spec{}, fieldErr(rule, rateField, rate, "> 0")
	}
	if err := nonNegative(rule, capField, capacity); err != nil {
		return spec{}, err
	}
	// The level of a bucket is kept in units of (requests × per µs), so that
	// draining rate units per µs is exact; capacity × per must stay below 2^53.
	if rate >= maxExact/2 || capacity > 0 && p > (maxExact/2)/capacity {
		return spec{}, fmt.Errorf("ratelimit: %s: %s (%d) × %s (%dµs) and %s (%d) must each stay below 2^52", rule, capField, capacity, perField, p, rateField, rate)
	}
	full := capacity * p
	return spec{kind: kindDrain, per: p, rate: rate, capacity: capacity, limit: capacity, delay: NoDelay,
		full: full}, nil
}

func (r TokenBucket) compile() (spec, error) {
	return drainSpec("TokenBucket", r.Refill, r.Capacity, "Refill", "Capacity", r.Every, "Every")
}

func (r GCRA) compile() (spec, error) {
	return drainSpec("GCRA", r.Rate, r.Burst, "Rate", "Burst", r.Per, "Per")
}

func (r LeakyBucket) compile() (spec, error) {
	if r.Burst < 0 {
		return spec{}, fieldErr("LeakyBucket", "Burst", r.Burst, ">= 0")
	}
	if r.Delay < 0 && r.Delay != NoDelay {
		return spec{}, fieldErr("LeakyBucket", "Delay", r.Delay, ">= 0 or NoDelay")
	}
	if r.Burst == maxExact-1 || r.Burst >= maxExact {
		return spec{}, fieldErr("LeakyBucket", "Burst", r.Burst, "< 2^53-1")
	}
	s, err := drainSpec("LeakyBucket", r.Rate, r.Burst+1, "Rate", "Burst", r.Per, "Per")
	if err != nil {
		return spec{}, err
	}
	s.delay = r.Delay
	return s, nil
}

func (n named) compile() (spec, error) {
	if n.r == nil {
		return spec{}, fmt.Errorf("ratelimit: Named(%q): rule is nil", n.name)
	}
	if n.name == "" {
		return spec{}, fmt.Errorf("ratelimit: Named: name is empty")
	}
	s, err := n.r.compile()
	if err != nil {
		return spec{}, err
	}
	s.name = n.name
	return s, nil
}

// identity returns every parameter of a rule: two rules of one Limiter with
// the same identity are the same rule.
func (s spec) identity() string {
	return fmt.Sprintf("%d|%d|%d|%d|%d|%d|%d|%d|%s", s.kind, s.limit, s.window, s.buckets, s.capacity, s.per, s.rate, s.delay, s.name)
}

// stateID returns what a rule counts, which identifies its state: its kind,
// its grain (the window of FixedWindow and SlidingLog, the window and bucket
// count of SlidingWindow, Per of a drain rule) and its name. Limits, bursts,
// capacities, rates and LeakyBucket's Delay are not part of it, so a state
// carries across a change of them.
func (s spec) stateID() string {
	switch s.kind {
	case kindFixed, kindLog:
		return fmt.Sprintf("%s%d|%s", kindLetter[s.kind], s.window, s.name)
	case kindSliding:
		return fmt.Sprintf("s%d/%d|%s", s.window, s.buckets, s.name)
	default:
		return fmt.Sprintf("d%d|%s", s.per, s.name)
	}
}

var kindLetter = map[kind]string{kindFixed: "f", kindSliding: "s", kindLog: "l", kindDrain: "d"}

// hashID hashes an identity into a short Redis key suffix and a memory tag.
// The suffix is prefix and five base-36 digits (36^5 ≈ 6·10^7 values):
// with a 16-byte user key the whole key stays within 28 bytes, Redis's 32-byte
// allocation class.
func hashID(prefix string, identity string) (string, uint64) {
	h := fnv.New64a()
	h.Write([]byte(identity))
	sum := h.Sum64()
	const space = 36 * 36 * 36 * 36 * 36
	return prefix + strconv.FormatUint(sum%space+space, 36)[1:], sum | 1
}
