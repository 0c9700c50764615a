package ratelimit_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// randomRule draws a rule with small parameters, so that random traffic
// reaches every branch: denials, never-admissible costs, window edges.
func randomRule(rng *rand.Rand) ratelimit.Rule {
	window := time.Duration(1+rng.IntN(20)) * 50 * ms
	switch rng.IntN(7) {
	case 0:
		return ratelimit.FixedWindow{Limit: rng.Int64N(6), Window: window}
	case 1:
		b := 1 + rng.IntN(6)
		return ratelimit.SlidingWindow{Limit: rng.Int64N(6), Window: window * time.Duration(b), Buckets: b}
	case 2:
		return ratelimit.SlidingLog{Limit: rng.Int64N(6), Window: window}
	case 3:
		return ratelimit.TokenBucket{Capacity: rng.Int64N(6), Refill: 1 + rng.Int64N(7), Every: window}
	case 4:
		delay := rng.Int64N(4) - 1
		return ratelimit.LeakyBucket{Rate: 1 + rng.Int64N(7), Per: window, Burst: rng.Int64N(5), Delay: delay}
	case 5:
		return ratelimit.GCRA{Rate: 1 + rng.Int64N(7), Per: window, Burst: rng.Int64N(6)}
	default:
		return ratelimit.Named(fmt.Sprint("r", rng.IntN(1000)), ratelimit.SlidingLog{Limit: rng.Int64N(6), Window: window})
	}
}

// TestDifferential runs random scenarios — random rule sets, arrivals, costs,
// keys, peeks and resets — on memory and on each Redis kind, and demands
// identical Results at every call.
func TestDifferential(t *testing.T) {
	scenarios := 40
	if testing.Short() {
		scenarios = 10
	}
	bks := allBackends()
	for _, other := range bks[1:] {
		t.Run("memory vs "+other.name, func(t *testing.T) {
			t.Parallel()
			planned, compared := 0, 0
			defer func() {
				// A stall now and then ends a scenario early; most calls
				// must still be compared.
				t.Logf("%d of %d calls compared", compared, planned)
				if compared < planned*3/4 {
					t.Errorf("only %d of %d calls compared: the machine outran the fake clock too often", compared, planned)
				}
			}()
			for sc := range scenarios {
				rng := rand.New(rand.NewPCG(uint64(sc), 7))
				var rules []ratelimit.Rule
				for range 1 + rng.IntN(3) {
					rules = append(rules, randomRule(rng))
				}
				clk := clock.NewFake(t0.Add(time.Duration(rng.Int64N(int64(time.Hour)))))
				ref, err := ratelimit.New(bks[0].make(t, clk), rules...)
				if err != nil {
					continue // two equal random rules: rejected, as TestBadRules checks
				}
				lim, err := ratelimit.New(other.make(t, clk), rules...)
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				planned += 150
				// Connect first (a Reset of each key), so that no call
				// below pays for a dial.
				for k := range 3 {
					if err := lim.Reset(ctx, fmt.Sprint("k", k)); err != nil {
						t.Fatal(err)
					}
				}
				last := time.Now()
				// ahead is the most the fake clock was ahead of real time
				// when a Redis call started: a state written then lives in
				// Redis until its end by the fake clock, as long as the
				// fake clock stays at least that far ahead.
				ahead := time.Duration(math.MinInt64)
				for i := range 150 {
					// Redis expires keys on its own clock: the fake clock
					// must not fall behind real time, or a key could vanish
					// in Redis before its state ends on the fake clock (a
					// busy machine made calls slower than their steps). last
					// is taken just before each Redis call, which comes
					// first, so a step covers all the real time from one
					// Redis call to the next but the moment between here
					// and the call, which 20ms more covers (a longer stall
					// is caught below).
					step := time.Duration(rng.Int64N(int64(120 * ms)))
					if spent := time.Since(last) + 20*ms; spent > step {
						step = spent
					}
					clk.Advance(step)
					key := fmt.Sprint("k", rng.IntN(3))
					if rng.IntN(40) == 0 {
						if err := ref.Reset(ctx, key); err != nil {
							t.Fatal(err)
						}
						if err := lim.Reset(ctx, key); err != nil {
							t.Fatal(err)
						}
						compared++
						continue
					}
					n := rng.Int64N(4)
					last = time.Now()
					got, err := lim.AllowN(ctx, key, n)
					if err != nil {
						t.Fatal(err)
					}
					if behind := ahead - time.Until(clk.Now()); behind > 0 {
						// The call may have ended after a state it read had
						// expired in Redis by Redis's own clock: this machine
						// stalled the test for longer than the step's
						// margin. The scenario's states cannot be compared
						// from here on.
						t.Logf("scenario %d call %d: real time outran the fake clock by %v; the rest of the scenario is not compared", sc, i, behind)
						break
					}
					ahead = max(ahead, clk.Now().Sub(last))
					compared++
					want, err := ref.AllowN(ctx, key, n)
					if err != nil {
						t.Fatal(err)
					}
					if got != want {
						t.Fatalf("scenario %d call %d, rules %+v, key %s, n=%d:\nmemory %+v\n%s %+v", sc, i, rules, key, n, want, other.name, got)
					}
				}
			}
		})
	}
}
