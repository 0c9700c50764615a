package simulate

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"image/png"
	"io"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/ratelimit"
)

const ms = time.Millisecond

// start is an instant on every window edge up to a day.
var start = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// boundary is the classic attack on a 1s window: 10 requests 10ms apart in
// [900ms, 990ms], then 10 in [1000ms, 1090ms].
func boundary(t *testing.T) *Traffic {
	t.Helper()
	tr, err := Pattern{Kind: Boundary, Start: start, Duration: 2 * time.Second, Window: time.Second, Count: 10, Spread: 100 * ms}.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func run(t *testing.T, tr *Traffic, rules ...Rule) *Report {
	t.Helper()
	rep, err := Run(context.Background(), tr, rules, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// offsets returns times as offsets from start.
func offsets(times []int64) []time.Duration {
	out := make([]time.Duration, len(times))
	for i, t := range times {
		out[i] = time.UnixMicro(t).Sub(start)
	}
	return out
}

func TestSimulateBoundaryPattern(t *testing.T) {
	tr := boundary(t)
	var want []time.Duration
	for i := range 10 {
		want = append(want, 900*ms+time.Duration(i)*10*ms)
	}
	for i := range 10 {
		want = append(want, time.Second+time.Duration(i)*10*ms)
	}
	if got := offsets(tr.Times); !slices.Equal(got, want) {
		t.Errorf("boundary times %v\nwant %v", got, want)
	}
}

// TestSimulateBoundaryCounts checks each algorithm's decisions on the boundary
// attack against counts worked out by hand from the rules' definitions.
func TestSimulateBoundaryCounts(t *testing.T) {
	tr := boundary(t)
	for _, tc := range []struct {
		rule     ratelimit.Rule
		admitted int64
		most     int64         // in any half-open 1s span
		last     time.Duration // the last admitted request
		maxDelay time.Duration
		why      string
	}{
		{ratelimit.FixedWindow{Limit: 10, Window: time.Second}, 20, 20, 1090 * ms, 0,
			"10 fill window 0 and 10 fill window 1: 2×Limit within 190ms, the double spend"},
		{ratelimit.SlidingWindow{Limit: 10, Window: time.Second, Buckets: 10}, 10, 10, 990 * ms, 0,
			"the 10 in bucket [900ms, 1s) count until 2s, so everything after the edge is denied"},
		{ratelimit.SlidingLog{Limit: 10, Window: time.Second}, 10, 10, 990 * ms, 0,
			"the first request leaves the log at 1.9s, after the traffic"},
		{ratelimit.TokenBucket{Capacity: 10, Refill: 10, Every: time.Second}, 11, 11, time.Second, 0,
			"a full bucket of 10, and the 1 token refilled in the 100ms from 900ms to 1s"},
		{ratelimit.GCRA{Rate: 10, Per: time.Second, Burst: 10}, 11, 11, time.Second, 0,
			"the same bucket as TokenBucket{10, 10, 1s}"},
		{ratelimit.LeakyBucket{Rate: 10, Per: time.Second}, 2, 2, time.Second, 0,
			"burst 0: one request per 100ms, at 900ms and 1s"},
		{ratelimit.LeakyBucket{Rate: 10, Per: time.Second, Burst: 10}, 12, 12, 1010 * ms, 990 * ms,
			"excess 0 at 900ms, then +0.9 per request 10ms apart: 8.1 at 990ms, 9.0 at 1s, 9.9 at 1.01s " +
				"(delayed 9.9/10 per s = 990ms), 10.8 > 10 at 1.02s and above 10 until 1.1s"},
	} {
		in, _ := describe(tc.rule)
		rep := run(t, tr, Rule{Name: in.algorithm, Rule: tc.rule})
		rr := rep.Rules[0]
		if rr.Admitted != tc.admitted || rr.Rejected != 20-tc.admitted || rr.MostInWindow != tc.most || rr.MaxDelay != tc.maxDelay {
			t.Errorf("%s: admitted %d, rejected %d, most %d, max delay %v; want %d, %d, %d, %v (%s)",
				rr.Params, rr.Admitted, rr.Rejected, rr.MostInWindow, rr.MaxDelay, tc.admitted, 20-tc.admitted, tc.most, tc.maxDelay, tc.why)
		}
		if got := offsets(rr.admitted); len(got) == 0 || got[len(got)-1] != tc.last {
			t.Errorf("%s: admitted at %v, want the last at %v (%s)", rr.Params, got, tc.last, tc.why)
		}
		if !rr.Held() {
			t.Errorf("%s: a documented bound broke: %+v", rr.Params, rr.Checks)
		}
	}
}

// TestSimulateFixedWindowDoubleSpend spells out the two fixed-window bounds
// under the boundary attack: each aligned window admits exactly Limit, and one
// span of a window admits 2×Limit, exactly its bound.
func TestSimulateFixedWindowDoubleSpend(t *testing.T) {
	rep := run(t, boundary(t), Rule{Name: "fw", Rule: ratelimit.FixedWindow{Limit: 10, Window: time.Second}})
	checks := rep.Rules[0].Checks
	if len(checks) != 2 {
		t.Fatalf("checks %+v", checks)
	}
	aligned, span := checks[0], checks[1]
	if aligned.Bound.Kind != PerAlignedWindow || aligned.Observed != 10 || aligned.Allowed != 10 || !aligned.Held {
		t.Errorf("aligned: %+v", aligned)
	}
	if span.Bound.Kind != InAnySpan || span.Observed != 20 || span.Allowed != 20 || !span.Held ||
		time.UnixMicro(span.From).Sub(start) != 900*ms || time.UnixMicro(span.To).Sub(start) != 1090*ms {
		t.Errorf("span: %+v", span)
	}
}

// TestSimulateSteady checks a steady overload of twice the limit.
func TestSimulateSteady(t *testing.T) {
	tr, err := Pattern{Kind: Steady, Start: start, Duration: 3 * time.Second, Rate: 20}.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if tr.Len() != 60 {
		t.Fatalf("%d requests, want 60", tr.Len())
	}
	rep := run(t, tr,
		Rule{"fw", ratelimit.FixedWindow{Limit: 10, Window: time.Second}},
		Rule{"log", ratelimit.SlidingLog{Limit: 10, Window: time.Second}},
		Rule{"gcra", ratelimit.GCRA{Rate: 10, Per: time.Second, Burst: 1}},
	)
	// Requests come every 50ms. The fixed window admits 0..450ms of each
	// second; the log admits the same ones (at 1s the request of 0 has left
	// (0, 1s]); GCRA with burst 1 admits one per 100ms: 0, 100ms, ... 2.9s.
	for i, want := range []int64{30, 30, 30} {
		if got := rep.Rules[i].Admitted; got != want {
			t.Errorf("%s admitted %d, want %d", rep.Rules[i].Params, got, want)
		}
	}
	if got := offsets(rep.Rules[2].admitted)[:3]; !slices.Equal(got, []time.Duration{0, 100 * ms, 200 * ms}) {
		t.Errorf("gcra admitted %v first", got)
	}
}

// TestSimulateKeys checks that each key of a traffic file has its own state.
func TestSimulateKeys(t *testing.T) {
	tr, err := ParseTraffic("t.csv", strings.NewReader("1735689600,alice\n1735689600,bob\n1735689600.1,alice\n1735689600.2,alice\n1735689600.3,bob\n"))
	if err != nil {
		t.Fatal(err)
	}
	rep := run(t, tr, Rule{"fw", ratelimit.FixedWindow{Limit: 2, Window: time.Second}})
	rr := rep.Rules[0]
	// alice: 3 requests, 2 admitted; bob: 2 requests, 2 admitted.
	if rr.Admitted != 4 || rr.MostInWindow != 2 || tr.Keys[rr.MostKey] != "alice" {
		t.Errorf("admitted %d, most %d for %q; want 4, 2 for alice", rr.Admitted, rr.MostInWindow, tr.Keys[rr.MostKey])
	}
}

// TestSimulateBoundsHold drives every rule with random traffic of several
// keys and checks that every documented bound holds (as ratelimit's
// TestBounds does, here through the simulator's exact checks).
func TestSimulateBoundsHold(t *testing.T) {
	rules := []Rule{
		{"fw", ratelimit.FixedWindow{Limit: 7, Window: 700 * ms}},
		{"sw", ratelimit.SlidingWindow{Limit: 7, Window: 700 * ms, Buckets: 7}},
		{"log", ratelimit.SlidingLog{Limit: 7, Window: 700 * ms}},
		{"tb", ratelimit.TokenBucket{Capacity: 5, Refill: 3, Every: 700 * ms}},
		{"lb", ratelimit.LeakyBucket{Rate: 3, Per: 700 * ms, Burst: 4, Delay: 2}},
		{"lb0", ratelimit.LeakyBucket{Rate: 7, Per: time.Second, Burst: 6}},
		{"lbn", ratelimit.LeakyBucket{Rate: 7, Per: time.Second, Burst: 6, Delay: ratelimit.NoDelay}},
		{"gcra", ratelimit.GCRA{Rate: 7, Per: 300 * ms, Burst: 4}},
	}
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 2))
		var b strings.Builder
		at := int64(1735689600_000000)
		for range 3000 {
			if rng.IntN(10) == 0 {
				at += rng.Int64N(2e6)
			} else {
				at += rng.Int64N(5e3)
			}
			fmt.Fprintf(&b, "%d.%06d,k%d\n", at/1e6, at%1e6, rng.IntN(3))
		}
		tr, err := ParseTraffic("random", strings.NewReader(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		for _, rr := range run(t, tr, rules...).Rules {
			if rr.Admitted == 0 {
				t.Errorf("seed %d: %s admitted nothing", seed, rr.Params)
			}
			for _, c := range rr.Checks {
				if !c.Held {
					t.Errorf("seed %d: %s broke %s (%s): %d > %d in [%d, %d] for key %d",
						seed, rr.Params, c.Bound, c.Bound.Doc, c.Observed, c.Allowed, c.From, c.To, c.Key)
				}
			}
		}
	}
}

// TestSimulateWrongBound feeds the checks bounds that the admitted traffic
// breaks, and expects them to say so, with the span that breaks them.
func TestSimulateWrongBound(t *testing.T) {
	tr := boundary(t)
	fw := run(t, tr, Rule{"fw", ratelimit.FixedWindow{Limit: 10, Window: time.Second}}).Rules[0]
	tb := run(t, tr, Rule{"tb", ratelimit.TokenBucket{Capacity: 10, Refill: 10, Every: time.Second}}).Rules[0]
	us := func(d time.Duration) int64 { return start.Add(d).UnixMicro() }
	for _, tc := range []struct {
		name     string
		bound    Bound
		times    []int64
		observed int64
		allowed  int64
		from, to int64
	}{
		{"the sliding log's bound on a fixed window", Bound{Kind: InAnySpan, Max: 10, Span: time.Second, Open: true},
			fw.admitted, 20, 10, us(900 * ms), us(1090 * ms)},
		{"the aligned bound one too tight", Bound{Kind: PerAlignedWindow, Max: 9, Span: time.Second},
			fw.admitted, 10, 9, us(900 * ms), us(990 * ms)},
		// [900ms, 990ms] breaks it too (10 > 9), but [900ms, 1s] by more: 11 - 9 - 10·0.1 = 1 > 10 - 9 - 10·0.09.
		{"a token bucket held to one token less", Bound{Kind: BurstPlusRate, Max: 9, Rate: 10, Per: time.Second},
			tb.admitted, 11, 10, us(900 * ms), us(time.Second)},
		{"a token bucket held to a slower refill", Bound{Kind: BurstPlusRate, Max: 10, Rate: 1, Per: time.Hour},
			tb.admitted, 11, 10, us(900 * ms), us(time.Second)},
	} {
		c := CheckBound(tc.bound, tc.times)
		if c.Held || c.Observed != tc.observed || c.Allowed != tc.allowed || c.From != tc.from || c.To != tc.to {
			t.Errorf("%s: %+v; want broken, %d > %d in [%d, %d]", tc.name, c, tc.observed, tc.allowed, tc.from, tc.to)
		}
	}

	// Through the engine: a fixed window checked against the sliding log's
	// bound is reported broken, and its chart says so.
	in, _ := describe(ratelimit.FixedWindow{Limit: 10, Window: time.Second})
	in.bounds = []Bound{{Kind: InAnySpan, Max: 10, Span: time.Second, Open: true, Doc: "wrong on purpose"}}
	rr, err := runRule(context.Background(), tr, []string{"k0"}, Rule{"fw", ratelimit.FixedWindow{Limit: 10, Window: time.Second}}, in, 0, 0, func(int64) {})
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Traffic: tr, Rules: []*RuleReport{rr}}
	if rr.Held() || rep.Held() || rr.Checks[0].Observed != 20 {
		t.Errorf("a broken bound reported as held: %+v", rr.Checks)
	}
	var svg bytes.Buffer
	if err := WriteChart(&svg, rep, SVG, ChartOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(svg.String(), "BOUND BROKEN: 20 &gt; 10") && !strings.Contains(svg.String(), "BOUND BROKEN: 20 > 10") {
		t.Errorf("the chart does not say the bound broke")
	}
}

// TestSimulateRateBoundExact compares the one-pass check of BurstPlusRate
// with trying every span, on both of its arithmetic paths.
func TestSimulateRateBoundExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for iter := range 300 {
		n := 1 + rng.IntN(60)
		times := make([]int64, n)
		at := rng.Int64N(1e15)
		for i := range times {
			if rng.IntN(4) > 0 {
				at += rng.Int64N(3e5)
			}
			times[i] = at
		}
		b := Bound{Kind: BurstPlusRate, Max: rng.Int64N(5), Rate: 1 + rng.Int64N(20), Per: time.Duration(1+rng.Int64N(2e6)) * time.Microsecond}
		if iter%3 == 0 { // long periods and huge rates take the big-integer path
			b.Per = ratelimit.MaxPeriod - time.Duration(rng.Int64N(1e6))*time.Microsecond
			b.Rate = 1<<51 - rng.Int64N(1e6)
		}
		c := CheckBound(b, times)
		// Brute force: every closed span [times[j], times[i]], counting every
		// request in it. The tightest span has the largest (count - Max)·Per -
		// Rate·d; the bound breaks when some span has count > Max + ⌊Rate·d/Per⌋.
		excess := func(cnt, d int64) *big.Int {
			v := new(big.Int).Mul(big.NewInt(cnt-b.Max), big.NewInt(int64(b.Per/time.Microsecond)))
			return v.Sub(v, new(big.Int).Mul(big.NewInt(b.Rate), big.NewInt(d)))
		}
		var best *big.Int
		broken := false
		for j := range times {
			for i := j; i < n; i++ {
				cnt := int64(0)
				for _, t := range times {
					if t >= times[j] && t <= times[i] {
						cnt++
					}
				}
				if e := excess(cnt, times[i]-times[j]); best == nil || e.Cmp(best) > 0 {
					best = e
				}
				_, allowed, _, _ := spanCount(b, times, i, j)
				broken = broken || cnt > allowed
			}
		}
		if got := excess(c.Observed, c.To-c.From); got.Cmp(best) != 0 || c.Held == broken {
			t.Fatalf("bound %+v on %v: one pass %+v with excess %v, brute force excess %v, broken %v", b, times, c, got, best, broken)
		}
	}
}

func TestSimulatePatterns(t *testing.T) {
	for _, tc := range []struct {
		p     Pattern
		count int
		first []time.Duration
	}{
		{Pattern{Kind: Steady, Rate: 10, Duration: time.Second}, 10, []time.Duration{0, 100 * ms, 200 * ms}},
		{Pattern{Kind: Steady, Rate: 3, Duration: time.Second}, 3, []time.Duration{0, 333333 * time.Microsecond, 666667 * time.Microsecond}},
		{Pattern{Kind: Bursty, Rate: 100, On: 30 * ms, Off: 70 * ms, Duration: 300 * ms}, 9,
			[]time.Duration{0, 10 * ms, 20 * ms, 100 * ms, 110 * ms, 120 * ms, 200 * ms}},
		// N(t) = 10t² requests by t: request k at sqrt(k/10) s.
		{Pattern{Kind: Ramp, From: 0, Rate: 20, Duration: time.Second}, 10, []time.Duration{0, 316228 * time.Microsecond, 447214 * time.Microsecond}},
		{Pattern{Kind: Ramp, From: 10, Rate: 10, Duration: time.Second}, 10, []time.Duration{0, 100 * ms}},
		{Pattern{Kind: Ramp, From: 20, Rate: 0, Duration: time.Second}, 10, []time.Duration{0, 51317 * time.Microsecond}},
		{Pattern{Kind: Boundary, Window: time.Minute, Count: 3, Spread: 3 * time.Second, Duration: 2 * time.Minute}, 6,
			[]time.Duration{57 * time.Second, 58 * time.Second, 59 * time.Second, time.Minute, 61 * time.Second}},
	} {
		tc.p.Start = start
		tr, err := tc.p.Generate()
		if err != nil {
			t.Errorf("%s: %v", tc.p.Describe(), err)
			continue
		}
		got := offsets(tr.Times)
		if len(got) != tc.count || !slices.Equal(got[:len(tc.first)], tc.first) {
			t.Errorf("%s: %d requests %v; want %d starting %v", tc.p.Describe(), len(got), got, tc.count, tc.first)
		}
		if !slices.IsSorted(tr.Times) || tr.Start != start || tr.End != start.Add(tc.p.Duration) {
			t.Errorf("%s: unsorted, or span %v to %v", tc.p.Describe(), tr.Start, tr.End)
		}
	}

	// Poisson: the seed decides, and the mean is near the rate.
	gen := func(seed uint64) []int64 {
		tr, err := Pattern{Kind: Poisson, Start: start, Rate: 100, Duration: 100 * time.Second, Seed: seed}.Generate()
		if err != nil {
			t.Fatal(err)
		}
		return tr.Times
	}
	a, b, c := gen(7), gen(7), gen(8)
	if !slices.Equal(a, b) || slices.Equal(a, c) {
		t.Errorf("poisson: the same seed gave different traffic, or different seeds the same")
	}
	if len(a) < 9500 || len(a) > 10500 {
		t.Errorf("poisson 100/s for 100s: %d requests", len(a))
	}
}

func TestSimulatePatternErrors(t *testing.T) {
	for _, tc := range []struct {
		p    Pattern
		want string
	}{
		{Pattern{Kind: "zigzag", Duration: time.Second}, `unknown traffic pattern "zigzag"`},
		{Pattern{Kind: Steady, Duration: time.Second}, "rate must be > 0"},
		{Pattern{Kind: Steady, Rate: 10}, "duration must be > 0"},
		{Pattern{Kind: Steady, Rate: 1e9, Duration: time.Hour}, "more than 10000000 requests"},
		{Pattern{Kind: Bursty, Rate: 10, Duration: time.Second}, "on must be at least 1µs"},
		{Pattern{Kind: Ramp, Duration: time.Second}, "rate and from are both 0"},
		{Pattern{Kind: Boundary, Duration: 2 * time.Second, Window: time.Second, Count: 10}, "spread must be > 0"},
		{Pattern{Kind: Boundary, Duration: time.Second, Window: time.Second, Count: 10, Spread: 100 * ms}, "must reach past the burst"},
		{Pattern{Kind: Boundary, Duration: 2 * time.Second, Window: time.Second, Spread: 100 * ms}, "count must be between 1"},
	} {
		tc.p.Start = start
		if _, err := tc.p.Generate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.p, err, tc.want)
		}
	}
}

func TestSimulateParseTraffic(t *testing.T) {
	tr, err := ParseTraffic("log.csv", strings.NewReader(`timestamp,key
# a comment

2025-01-01T00:00:01.5Z,alice
1735689600.25,"bob,jr"
2025-01-01T01:00:00+01:00
1735689601.1234567,alice
`))
	if err != nil {
		t.Fatal(err)
	}
	wantTimes := []time.Duration{0, 250 * ms, 1123456 * time.Microsecond, 1500 * ms}
	if got := offsets(tr.Times); !slices.Equal(got, wantTimes) {
		t.Errorf("times %v, want %v", got, wantTimes)
	}
	if want := []string{"", "bob,jr", "alice"}; !slices.Equal(tr.Keys, want) {
		t.Errorf("keys %q, want %q", tr.Keys, want)
	}
	if want := []int32{0, 1, 2, 2}; !slices.Equal(tr.Key, want) {
		t.Errorf("key of each request %v, want %v", tr.Key, want)
	}
	if tr.Start != start || tr.End != start.Add(2*time.Second) {
		t.Errorf("span %v to %v", tr.Start, tr.End)
	}

	// Without keys.
	tr, err = ParseTraffic("ts", strings.NewReader("1\n0.5\n"))
	if err != nil || tr.Key != nil || len(tr.Keys) != 1 || !slices.Equal(tr.Times, []int64{500000, 1000000}) {
		t.Errorf("%+v, %v", tr, err)
	}
}

func TestSimulateParseTrafficErrors(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"", "f: no requests"},
		{"# only a comment\n", "f: no requests"},
		{"noon,a\n1735689600,a\n", `f:1: "noon" is not a timestamp; want RFC3339`},
		{"1735689600\n1735689601\nyesterday\n", `f:3: "yesterday" is not a timestamp; want RFC3339`},
		{"1735689600\n\n1735689601,a,b\n", "f:3: 3 fields; want a timestamp, or timestamp,key"},
		{"time,key\n1735689600,a\n2025-13-01T00:00:00Z,b\n", `f:3: "2025-13-01T00:00:00Z" is not an RFC3339 timestamp`},
		{"1735689600\n-5\n", `f:2: "-5" is before 1970`},
		{"1969-12-31T23:59:59Z\n", "f:1: 1969-12-31T23:59:59Z is out of range"},
		{"99999999999\n", "f:1: 99999999999 is out of range"},
		{"1.5e9\n", `f:1: "1.5e9" is not a timestamp`},
		{"1735689600\n,alice\n", "f:2: empty timestamp"},
		{"1735689600\n1735689600.x\n", `f:2: "1735689600.x" is not a timestamp`},
		{"1735689600\n\"1735689601\"x\"\n", `f:2: "1735689601\"x" is not a timestamp`},
	} {
		_, err := ParseTraffic("f", strings.NewReader(tc.in))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q...", tc.in, err, tc.want)
		}
	}
}

func FuzzSimulateParseTraffic(f *testing.F) {
	for _, s := range []string{"1735689600.25\n", "timestamp,key\n2025-01-01T00:00:01.5Z,alice\n", "1,\"a,b\"\n0.5\n", "#\n\n1.\n", "x\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		tr, err := ParseTraffic("f", strings.NewReader(in))
		if err != nil {
			le, ok := err.(*LineError)
			if !ok || le.Line < 0 || le.Line > strings.Count(in, "\n")+2 || le.Msg == "" {
				t.Fatalf("error %#v", err)
			}
			return
		}
		if tr.Len() == 0 || !slices.IsSorted(tr.Times) || tr.Times[0] < 0 || tr.Times[tr.Len()-1] >= maxMicros {
			t.Fatalf("times %v", tr.Times)
		}
		if tr.Key != nil && len(tr.Key) != tr.Len() || len(tr.Keys) == 0 {
			t.Fatalf("keys %v of %v", tr.Key, tr.Keys)
		}
		for i := range tr.Len() {
			if k := tr.keyOf(i); k < 0 || k >= len(tr.Keys) {
				t.Fatalf("request %d has key %d of %d", i, k, len(tr.Keys))
			}
		}
		if tr.Start.UnixMicro() > tr.Times[0] || tr.End.UnixMicro() <= tr.Times[tr.Len()-1] {
			t.Fatalf("span %v to %v does not hold the requests", tr.Start, tr.End)
		}
	})
}

// TestSimulateChart checks that both formats decode, that the SVG has one
// panel title per rule, and that the same input draws the same bytes.
func TestSimulateChart(t *testing.T) {
	tr := boundary(t)
	var rules []Rule
	for _, a := range Algorithms {
		r, err := NewRule(a, 10, time.Second, RuleOptions{Burst: 10, HasBurst: true})
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, Rule{Name: a, Rule: r})
	}
	rep := run(t, tr, rules...)
	draw := func(format string) []byte {
		var b bytes.Buffer
		if err := WriteChart(&b, rep, format, ChartOptions{}); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	svg := draw(SVG)
	texts := svgTexts(t, svg)
	for _, rr := range rep.Rules {
		n := 0
		for _, s := range texts {
			if strings.HasPrefix(s, rr.Params+" — admitted") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d panel titles for %s in %q", n, rr.Params, texts)
		}
	}
	if !slices.Contains(texts, "served (after Delay)") || !slices.Contains(texts, tr.Name) {
		t.Errorf("no delayed series or no title in %q", texts)
	}
	if len(svg) > 150<<10 {
		t.Errorf("SVG of %d bytes", len(svg))
	}
	if !bytes.Equal(svg, draw(SVG)) {
		t.Errorf("two SVGs of one report differ")
	}
	if _, err := png.Decode(bytes.NewReader(draw(PNG))); err != nil {
		t.Errorf("PNG: %v", err)
	}
	if err := WriteChart(io.Discard, rep, "gif", ChartOptions{}); err == nil {
		t.Errorf("gif: no error")
	}
}

// svgTexts returns the text of every <text> element of an SVG document, which
// must be well-formed XML.
func svgTexts(t *testing.T, svg []byte) []string {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	var texts []string
	in := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			in = tok.Name.Local == "text"
		case xml.CharData:
			if in {
				texts = append(texts, string(tok))
			}
		case xml.EndElement:
			in = false
		}
	}
	return texts
}

func TestSimulateRunErrors(t *testing.T) {
	tr := boundary(t)
	for _, tc := range []struct {
		rule ratelimit.Rule
		want string
	}{
		{ratelimit.GCRA{Rate: 0, Per: time.Second}, `simulate: rule "r": ratelimit: GCRA.Rate must be > 0, got 0`},
		{ratelimit.Named("x", ratelimit.GCRA{Rate: 1, Per: time.Second}), "Named rules are not simulated"},
		{nil, "rule is nil"},
	} {
		if _, err := Run(context.Background(), tr, []Rule{{"r", tc.rule}}, Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.rule, err, tc.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	many, err := Pattern{Kind: Steady, Start: start, Rate: 1e5, Duration: time.Second}.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(ctx, many, []Rule{{"r", ratelimit.GCRA{Rate: 1, Per: time.Second, Burst: 1}}}, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestSimulateProgress(t *testing.T) {
	tr, err := Pattern{Kind: Steady, Start: start, Rate: 1e5, Duration: time.Second}.Generate()
	if err != nil {
		t.Fatal(err)
	}
	var last, calls int64
	_, err = Run(context.Background(), tr, []Rule{
		{"a", ratelimit.GCRA{Rate: 1, Per: time.Second, Burst: 1}},
		{"b", ratelimit.SlidingLog{Limit: 1, Window: time.Second}},
	}, Options{Progress: func(done, total int64) {
		if done < last || total != 2e5 {
			t.Errorf("progress %d of %d after %d", done, total, last)
		}
		last = done
		calls++
	}})
	if err != nil || last != 2e5 || calls < 2 {
		t.Errorf("progress ended at %d after %d calls, err %v", last, calls, err)
	}
}

// TestRunLeased: with Options.Leased each rule that can lease runs again
// through quota leases in that many processes: its report follows the
// rule's, the processes' admissions add up, it never admits more than the
// exact rule nor breaks the rule's bounds, and a rule that cannot lease is
// named with the reason.
func TestRunLeased(t *testing.T) {
	tr, err := Pattern{Kind: Steady, Rate: 150, Duration: 5 * time.Second, Start: time.Unix(1_700_000_000, 0)}.Generate()
	if err != nil {
		t.Fatal(err)
	}
	rules := []Rule{
		{"gcra", ratelimit.GCRA{Rate: 100, Per: time.Second, Burst: 100}},
		{"fixed_window", ratelimit.FixedWindow{Limit: 100, Window: time.Second}},
		{"sliding_log", ratelimit.SlidingLog{Limit: 100, Window: time.Second}},
	}
	rep, err := Run(context.Background(), tr, rules, Options{Leased: 3, LeaseTarget: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rules) != 5 || len(rep.NotLeased) != 1 || !strings.Contains(rep.NotLeased[0], "sliding_log") {
		t.Fatalf("%d reports, not leased %v", len(rep.Rules), rep.NotLeased)
	}
	for i, rr := range rep.Rules {
		if !rr.Held() {
			t.Errorf("%s: a bound broke", rr.Name)
		}
		if rr.Processes == 0 {
			continue
		}
		exact := rep.Rules[i-1]
		var sum int64
		for _, n := range rr.PerProcess {
			sum += n
			if n == 0 {
				t.Errorf("%s: a process admitted nothing: %v", rr.Name, rr.PerProcess)
			}
		}
		if rr.Processes != 3 || len(rr.PerProcess) != 3 || sum != rr.Admitted || rr.Exact != exact.Admitted || exact.Processes != 0 {
			t.Errorf("%s: processes %d, per process %v (sum %d), admitted %d, exact %d (the rule before: %s, %d)",
				rr.Name, rr.Processes, rr.PerProcess, sum, rr.Admitted, rr.Exact, exact.Name, exact.Admitted)
		}
		if rr.Admitted > rr.Exact || rr.Admitted < rr.Exact*9/10 {
			t.Errorf("%s: admitted %d, the exact rule %d: want at most that, and not 10%% less", rr.Name, rr.Admitted, rr.Exact)
		}
	}
}
