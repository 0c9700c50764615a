package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// TestLeasedGiveBack checks, on every backend, what a lease takes from the
// store and what a give-back returns for each algorithm, in step tables:
// after each step the store's Remaining (a peek of a plain Limiter on the
// same store) must be want.
func TestLeasedGiveBack(t *testing.T) {
	type step struct {
		advance time.Duration
		do      string // "allow", "release", "other" (a plain Limiter takes 1)
		store   int64  // the store's Remaining after the step
	}
	tables := []struct {
		name  string
		rule  ratelimit.Rule
		steps []step
	}{
		{"fixed window: back into its window, dropped after it", ratelimit.FixedWindow{Limit: 10, Window: 10 * time.Second}, []step{
			{0, "allow", 6},             // a lease of 4: 1 used, 3 held
			{time.Second, "release", 9}, // the 3 go back
			{0, "allow", 5},
			{0, "other", 4},
			{0, "release", 7}, // back even after another's decision
			{0, "allow", 3},
			{10 * time.Second, "release", 10}, // the window ended: a new one is full
		}},
		{"sliding window: back into its bucket while it is in the window", ratelimit.SlidingWindow{Limit: 10, Window: 10 * time.Second, Buckets: 2}, []step{
			{0, "allow", 6},
			{0, "release", 9},
			{0, "allow", 5},
			{6 * time.Second, "release", 8}, // the lease's bucket ended but still counts: back into it
			{10 * time.Second, "allow", 6},  // both old buckets left the window
		}},
		// A lease of a drain rule first raises a level below LeaseTarget's
		// drain (2 s here: 2 units) to it, so that its units can wait; the
		// raise's units are the lease's first ones (the rule drains only).
		{"gcra: back while the level is the lease's", ratelimit.GCRA{Rate: 1, Per: time.Second, Burst: 10}, []step{
			{0, "allow", 4},                  // pad 2, lease 4: 6 units, 1 used
			{0, "release", 9},                // the 5 unused back, the pad's with them
			{0, "allow", 4},                  // level 1: a pad of 1, and the lease
			{2 * time.Second, "release", 10}, // drained 2, gave back 4
			{0, "allow", 4},                  // level 0: a pad of 2
			{0, "other", 3},                  // another decision: the lease's units are no longer on top
			{0, "release", 3},                // so they stay, until they drain
			{4 * time.Second, "allow", 3},
		}},
		{"token bucket", ratelimit.TokenBucket{Capacity: 10, Refill: 1, Every: time.Second}, []step{
			{0, "allow", 4},
			{time.Second, "release", 10},
		}},
	}
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			for _, tb := range tables {
				t.Run(tb.name, func(t *testing.T) {
					ctx := context.Background()
					clk := clock.NewFake(t0)
					b := bk.make(t, clk)
					lim, err := ratelimit.New(b, tb.rule)
					if err != nil {
						t.Fatal(err)
					}
					l, err := ratelimit.NewLeased(lim, ratelimit.LeaseSize(4, 4), ratelimit.LeaseFraction(1), ratelimit.LeaseTarget(2*time.Second))
					if err != nil {
						t.Fatal(err)
					}
					for i, s := range tb.steps {
						clk.Advance(s.advance)
						switch s.do {
						case "allow":
							r, err := l.Allow(ctx, "k")
							if err != nil || !r.Allowed {
								t.Fatalf("step %d: Allow: %+v, %v", i+1, r, err)
							}
						case "release":
							if err := l.Release(ctx, "k"); err != nil {
								t.Fatalf("step %d: %v", i+1, err)
							}
						case "other":
							if r, err := lim.Allow(ctx, "k"); err != nil || !r.Allowed {
								t.Fatalf("step %d: Limiter.Allow: %+v, %v", i+1, r, err)
							}
						}
						peek, err := lim.AllowN(ctx, "k", 0)
						if err != nil {
							t.Fatal(err)
						}
						if peek.Remaining != s.store {
							t.Errorf("step %d (%s at %v): the store has %d left, want %d", i+1, s.do, clk.Now().Sub(t0), peek.Remaining, s.store)
						}
					}
				})
			}
		})
	}
}
