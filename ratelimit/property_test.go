package ratelimit_test

import (
	"context"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// admission is one admitted call: its time and cost.
type admission struct {
	at time.Duration
	n  int64
}

// most returns the largest total cost admitted in any span [t, t+span]
// (closed when closed is true, else half-open (t-span, t]).
func most(adm []admission, span time.Duration, closed bool) int64 {
	var best, sum int64
	j := 0
	for i := range adm {
		sum += adm[i].n
		for adm[j].at < adm[i].at-span || !closed && adm[j].at == adm[i].at-span {
			sum -= adm[j].n
			j++
		}
		best = max(best, sum)
	}
	return best
}

// TestBounds drives every rule with random bursty arrivals on a fake clock and
// checks the documented bound of docs/algorithms.md: the most any span of one
// window (or of any length, for the buckets) ever admits.
func TestBounds(t *testing.T) {
	type bound struct {
		rule  ratelimit.Rule
		check func(t *testing.T, adm []admission)
	}
	window := time.Second
	windowBound := func(limit int64, span time.Duration, closed bool) func(*testing.T, []admission) {
		return func(t *testing.T, adm []admission) {
			if got := most(adm, span, closed); got > limit {
				t.Errorf("admitted %d in a span of %v, bound %d", got, span, limit)
			}
		}
	}
	// A drain rule of capacity c, rate r per p admits at most c + r·d/p in any span d.
	drainBound := func(c, r int64, p time.Duration) func(*testing.T, []admission) {
		return func(t *testing.T, adm []admission) {
			for _, d := range []time.Duration{0, 10 * ms, 100 * ms, p, 3 * p} {
				got := most(adm, d, true)
				if limit := c + int64(float64(r)*float64(d)/float64(p)); got > limit {
					t.Errorf("admitted %d in a span of %v, bound %d", got, d, limit)
				}
			}
		}
	}
	bounds := map[string]bound{
		"fixed window: Limit per aligned window": {ratelimit.FixedWindow{Limit: 10, Window: window}, func(t *testing.T, adm []admission) {
			per := map[int64]int64{}
			for _, a := range adm {
				per[int64(a.at/window)] += a.n
			}
			for w, n := range per {
				if n > 10 {
					t.Errorf("window %d admitted %d", w, n)
				}
			}
			windowBound(20, window, true)(t, adm)
		}},
		"sliding window: Limit per any closed span": {ratelimit.SlidingWindow{Limit: 10, Window: window, Buckets: 5}, windowBound(10, window, true)},
		"sliding log: Limit per any window":         {ratelimit.SlidingLog{Limit: 10, Window: window}, windowBound(10, window, false)},
		"token bucket":                              {ratelimit.TokenBucket{Capacity: 10, Refill: 3, Every: window}, drainBound(10, 3, window)},
		"gcra":                                      {ratelimit.GCRA{Rate: 7, Per: window, Burst: 4}, drainBound(4, 7, window)},
		"leaky bucket":                              {ratelimit.LeakyBucket{Rate: 5, Per: window, Burst: 3}, drainBound(4, 5, window)},
	}
	for name, b := range bounds {
		t.Run(name, func(t *testing.T) {
			for seed := range 20 {
				rng := rand.New(rand.NewPCG(uint64(seed), 1))
				clk := clock.NewFake(t0)
				m := backend.NewMemory(backend.WithClock(clk))
				lim, err := ratelimit.New(m, b.rule)
				if err != nil {
					t.Fatal(err)
				}
				var adm []admission
				var at time.Duration
				for range 3000 {
					// Bursts of back-to-back calls separated by pauses, around window edges.
					if rng.IntN(10) == 0 {
						at += time.Duration(rng.Int64N(int64(2 * window)))
					} else {
						at += time.Duration(rng.Int64N(int64(5 * ms)))
					}
					clk.Set(t0.Add(at))
					n := 1 + rng.Int64N(3)
					r, err := lim.AllowN(context.Background(), "k", n)
					if err != nil {
						t.Fatal(err)
					}
					if r.Allowed {
						adm = append(adm, admission{at, n})
					}
				}
				sort.Slice(adm, func(i, j int) bool { return adm[i].at < adm[j].at })
				if len(adm) == 0 {
					t.Fatal("nothing admitted")
				}
				b.check(t, adm)
				m.Close()
			}
		})
	}
}

// TestRetryAfterIsExact checks that a denied call succeeds exactly at
// RetryAfter, and not one microsecond sooner, for every rule.
func TestRetryAfterIsExact(t *testing.T) {
	rules := []ratelimit.Rule{
		ratelimit.FixedWindow{Limit: 3, Window: 700 * ms},
		ratelimit.SlidingWindow{Limit: 3, Window: 700 * ms, Buckets: 7},
		ratelimit.SlidingLog{Limit: 3, Window: 700 * ms},
		ratelimit.TokenBucket{Capacity: 3, Refill: 2, Every: 700 * ms},
		ratelimit.LeakyBucket{Rate: 3, Per: 700 * ms, Burst: 2},
		ratelimit.GCRA{Rate: 3, Per: 700 * ms, Burst: 3},
	}
	for _, rule := range rules {
		rng := rand.New(rand.NewPCG(3, 3))
		for range 200 {
			clk := clock.NewFake(t0)
			m := backend.NewMemory(backend.WithClock(clk))
			lim, _ := ratelimit.New(m, rule)
			ctx := context.Background()
			var r ratelimit.Result
			for {
				clk.Advance(time.Duration(rng.Int64N(int64(150 * ms))))
				r, _ = lim.AllowN(ctx, "k", 1+rng.Int64N(2))
				if !r.Allowed {
					break
				}
			}
			n := 1 + rng.Int64N(2)
			r, _ = lim.AllowN(ctx, "k", n)
			if r.Allowed || r.RetryAfter <= 0 {
				continue
			}
			clk.Advance(r.RetryAfter - time.Microsecond)
			if early, _ := lim.AllowN(ctx, "k", n); early.Allowed {
				t.Fatalf("%T: admitted 1µs before RetryAfter %v", rule, r.RetryAfter)
			}
			clk.Advance(time.Microsecond)
			if on, _ := lim.AllowN(ctx, "k", n); !on.Allowed {
				t.Fatalf("%T: denied at RetryAfter %v: %+v", rule, r.RetryAfter, on)
			}
			m.Close()
		}
	}
}
