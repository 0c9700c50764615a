package ratelimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// limitChange is a rule before and after a change of its limit, burst or
// rate: spent units of before must carry into after.
type limitChange struct {
	name          string
	before, after ratelimit.Rule
	spend         int64
	wait          time.Duration // between the change and the check
	remaining     int64         // of after, peeked after wait
}

func limitChanges() []limitChange {
	return []limitChange{
		{"fixed raised", ratelimit.FixedWindow{Limit: 5, Window: time.Minute}, ratelimit.FixedWindow{Limit: 10, Window: time.Minute}, 4, 0, 6},
		{"fixed lowered", ratelimit.FixedWindow{Limit: 5, Window: time.Minute}, ratelimit.FixedWindow{Limit: 3, Window: time.Minute}, 4, 0, 0},
		{"sliding raised", ratelimit.SlidingWindow{Limit: 5, Window: time.Minute, Buckets: 6}, ratelimit.SlidingWindow{Limit: 8, Window: time.Minute, Buckets: 6}, 5, 0, 3},
		{"sliding lowered", ratelimit.SlidingWindow{Limit: 5, Window: time.Minute, Buckets: 6}, ratelimit.SlidingWindow{Limit: 2, Window: time.Minute, Buckets: 6}, 3, 0, 0},
		{"log raised", ratelimit.SlidingLog{Limit: 5, Window: time.Minute}, ratelimit.SlidingLog{Limit: 7, Window: time.Minute}, 5, 0, 2},
		{"log lowered", ratelimit.SlidingLog{Limit: 5, Window: time.Minute}, ratelimit.SlidingLog{Limit: 1, Window: time.Minute}, 2, 0, 0},
		{"token bucket capacity raised", ratelimit.TokenBucket{Capacity: 10, Refill: 1, Every: time.Second}, ratelimit.TokenBucket{Capacity: 20, Refill: 1, Every: time.Second}, 8, 0, 12},
		{"token bucket capacity lowered", ratelimit.TokenBucket{Capacity: 10, Refill: 1, Every: time.Second}, ratelimit.TokenBucket{Capacity: 5, Refill: 1, Every: time.Second}, 8, 0, 0},
		// 8 spent at 1/s, then 2 s at the new rate of 3/s: 6 back, 8 left of 10.
		{"token bucket rate raised", ratelimit.TokenBucket{Capacity: 10, Refill: 1, Every: time.Second}, ratelimit.TokenBucket{Capacity: 10, Refill: 3, Every: time.Second}, 8, 2 * time.Second, 8},
		{"gcra burst and rate changed", ratelimit.GCRA{Rate: 10, Per: time.Second, Burst: 20}, ratelimit.GCRA{Rate: 5, Per: time.Second, Burst: 30}, 20, time.Second, 15},
		{"leaky bucket burst raised", ratelimit.LeakyBucket{Rate: 1, Per: time.Second, Burst: 4, Delay: ratelimit.NoDelay}, ratelimit.LeakyBucket{Rate: 1, Per: time.Second, Burst: 9, Delay: 2}, 5, 0, 5},
	}
}

// TestCountsSurviveLimitChange: a Limiter built with a new limit, burst or
// rate (a config reload) sees what the old one spent, on every backend; and
// a change of grain or algorithm starts afresh.
func TestCountsSurviveLimitChange(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			b := bk.make(t, clk)
			for i, c := range limitChanges() {
				key := fmt.Sprint("change-", i)
				before, err := ratelimit.New(b, c.before)
				if err != nil {
					t.Fatal(err)
				}
				if r := allowN(t, before, key, c.spend); !r.Allowed {
					t.Fatalf("%s: spending %d: %+v", c.name, c.spend, r)
				}
				after, err := ratelimit.New(b, c.after)
				if err != nil {
					t.Fatal(err)
				}
				clk.Advance(c.wait)
				r := allowN(t, after, key, 0)
				if r.Remaining != c.remaining {
					t.Errorf("%s: after the change %+v, want Remaining %d", c.name, r, c.remaining)
				}
				if c.remaining == 0 {
					if r := allowN(t, after, key, 1); r.Allowed || r.RetryAfter <= 0 {
						t.Errorf("%s: lowered below what was spent, a unit was %+v; want denied with RetryAfter > 0", c.name, r)
					}
				}
				clk.Advance(2 * time.Minute) // every state of this case is back to full
			}

			// Different grain, different algorithm, a new rule: afresh.
			fresh := []struct {
				name          string
				before, after []ratelimit.Rule
			}{
				{"window changed", []ratelimit.Rule{ratelimit.FixedWindow{Limit: 5, Window: time.Minute}}, []ratelimit.Rule{ratelimit.FixedWindow{Limit: 5, Window: time.Hour}}},
				{"algorithm changed", []ratelimit.Rule{ratelimit.FixedWindow{Limit: 5, Window: time.Minute}}, []ratelimit.Rule{ratelimit.SlidingWindow{Limit: 5, Window: time.Minute}}},
				{"renamed", []ratelimit.Rule{ratelimit.GCRA{Rate: 5, Per: time.Second, Burst: 5}}, []ratelimit.Rule{ratelimit.Named("x", ratelimit.GCRA{Rate: 5, Per: time.Second, Burst: 5})}},
				{"rule added", []ratelimit.Rule{ratelimit.GCRA{Rate: 5, Per: time.Second, Burst: 5}}, []ratelimit.Rule{ratelimit.GCRA{Rate: 5, Per: time.Second, Burst: 5}, ratelimit.FixedWindow{Limit: 100, Window: time.Hour}}},
			}
			for i, c := range fresh {
				key := fmt.Sprint("fresh-", i)
				before, err := ratelimit.New(b, c.before...)
				if err != nil {
					t.Fatal(err)
				}
				allowN(t, before, key, 5)
				after, err := ratelimit.New(b, c.after...)
				if err != nil {
					t.Fatal(err)
				}
				if r := allowN(t, after, key, 0); r.Remaining != 5 {
					t.Errorf("%s: %+v, want a fresh state (Remaining 5)", c.name, r)
				}
			}

			// Reordered rules and changed limits in a multi-rule Limiter: one state.
			a, err := ratelimit.New(b, ratelimit.GCRA{Rate: 1, Per: time.Second, Burst: 10}, ratelimit.FixedWindow{Limit: 50, Window: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			c, err := ratelimit.New(b, ratelimit.FixedWindow{Limit: 60, Window: time.Hour}, ratelimit.GCRA{Rate: 1, Per: time.Second, Burst: 12})
			if err != nil {
				t.Fatal(err)
			}
			allowN(t, a, "multi", 7)
			if r := allowN(t, c, "multi", 0); r.Remaining != 5 || r.Rule != 1 {
				t.Errorf("reordered multi-rule Limiter: %+v, want the GCRA binding with 12-7 = 5 left", r)
			}
			if r := allowN(t, c, "multi", 6); r.Allowed {
				t.Errorf("reordered multi-rule Limiter admitted 6 with 5 left: %+v", r)
			}
		})
	}
}

// TestConcurrencyLeasesSurviveLimitChange: a ConcurrencyLimiter rebuilt
// with another Limit or Lease sees the live leases, on every backend.
func TestConcurrencyLeasesSurviveLimitChange(t *testing.T) {
	ctx := context.Background()
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			b := bk.make(t, clk)
			four, err := ratelimit.NewConcurrency(b, ratelimit.Concurrency{Limit: 4, Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if _, r, err := four.Acquire(ctx, "k"); err != nil || !r.Allowed {
					t.Fatalf("%+v %v", r, err)
				}
			}
			two, err := ratelimit.NewConcurrency(b, ratelimit.Concurrency{Limit: 2, Lease: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if _, r, err := two.Acquire(ctx, "k"); err != nil || r.Allowed {
				t.Fatalf("Limit lowered to 2 with 3 leases live: %+v %v, want denied", r, err)
			}
			five, err := ratelimit.NewConcurrency(b, ratelimit.Concurrency{Limit: 5, Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if _, r, err := five.Acquire(ctx, "k"); err != nil || !r.Allowed || r.Remaining != 1 {
				t.Fatalf("Limit raised to 5 with 3 leases live: %+v %v, want allowed with 1 left", r, err)
			}
		})
	}
}
