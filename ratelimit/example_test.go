package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// show prints one decision per call of AllowN, moving a fake clock by the
// given steps, so the examples print the same on every run.
func show(rules []ratelimit.Rule, steps ...time.Duration) {
	clk := clock.NewFake(time.Unix(1_699_999_980, 0)) // on a minute boundary
	mem := backend.NewMemory(backend.WithClock(clk))
	defer mem.Close()
	lim, err := ratelimit.New(mem, rules...)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range steps {
		clk.Advance(d)
		r, err := lim.Allow(context.Background(), "alice")
		if err != nil {
			fmt.Println(err)
			return
		}
		if r.Allowed {
			fmt.Printf("allowed: remaining %d, delay %v, reset in %v\n", r.Remaining, r.Delay, r.ResetAfter)
		} else {
			fmt.Printf("denied by rule %d %q: retry in %v\n", r.Rule, r.RuleName, r.RetryAfter)
		}
	}
}

func ExampleFixedWindow() {
	show([]ratelimit.Rule{ratelimit.FixedWindow{Limit: 2, Window: time.Second}},
		0, 0, 0, 600*time.Millisecond, 400*time.Millisecond)
	// Output:
	// allowed: remaining 1, delay 0s, reset in 1s
	// allowed: remaining 0, delay 0s, reset in 1s
	// denied by rule 0 "": retry in 1s
	// denied by rule 0 "": retry in 400ms
	// allowed: remaining 1, delay 0s, reset in 1s
}

func ExampleSlidingWindow() {
	show([]ratelimit.Rule{ratelimit.SlidingWindow{Limit: 2, Window: time.Second, Buckets: 4}},
		0, 900*time.Millisecond, 100*time.Millisecond, 250*time.Millisecond)
	// Output:
	// allowed: remaining 1, delay 0s, reset in 1.25s
	// allowed: remaining 0, delay 0s, reset in 1.1s
	// denied by rule 0 "": retry in 250ms
	// allowed: remaining 0, delay 0s, reset in 1.25s
}

func ExampleSlidingLog() {
	// At most 1 per 100ms and 3 per second, in one log.
	show([]ratelimit.Rule{
		ratelimit.Named("burst", ratelimit.SlidingLog{Limit: 1, Window: 100 * time.Millisecond}),
		ratelimit.Named("sustained", ratelimit.SlidingLog{Limit: 3, Window: time.Second}),
	}, 0, 50*time.Millisecond, 50*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond)
	// Output:
	// allowed: remaining 0, delay 0s, reset in 100ms
	// denied by rule 0 "burst": retry in 50ms
	// allowed: remaining 0, delay 0s, reset in 100ms
	// allowed: remaining 0, delay 0s, reset in 100ms
	// denied by rule 1 "sustained": retry in 700ms
}

func ExampleTokenBucket() {
	// 3 tokens, one more every 100ms.
	show([]ratelimit.Rule{ratelimit.TokenBucket{Capacity: 3, Refill: 1, Every: 100 * time.Millisecond}},
		0, 0, 0, 0, 50*time.Millisecond, 50*time.Millisecond)
	// Output:
	// allowed: remaining 2, delay 0s, reset in 100ms
	// allowed: remaining 1, delay 0s, reset in 200ms
	// allowed: remaining 0, delay 0s, reset in 300ms
	// denied by rule 0 "": retry in 100ms
	// denied by rule 0 "": retry in 50ms
	// allowed: remaining 0, delay 0s, reset in 300ms
}

func ExampleLeakyBucket() {
	// nginx: limit_req zone=one burst=3 delay=1, with rate=2r/s.
	show([]ratelimit.Rule{ratelimit.LeakyBucket{Rate: 2, Per: time.Second, Burst: 3, Delay: 1}},
		0, 0, 0, 0, 0)
	// Output:
	// allowed: remaining 3, delay 0s, reset in 500ms
	// allowed: remaining 2, delay 0s, reset in 1s
	// allowed: remaining 1, delay 500ms, reset in 1.5s
	// allowed: remaining 0, delay 1s, reset in 2s
	// denied by rule 0 "": retry in 500ms
}

func ExampleGCRA() {
	// 10 per second, bursts of 2: one request every 100ms on average.
	show([]ratelimit.Rule{ratelimit.GCRA{Rate: 10, Per: time.Second, Burst: 2}},
		0, 0, 0, 30*time.Millisecond, 70*time.Millisecond)
	// Output:
	// allowed: remaining 1, delay 0s, reset in 100ms
	// allowed: remaining 0, delay 0s, reset in 200ms
	// denied by rule 0 "": retry in 100ms
	// denied by rule 0 "": retry in 70ms
	// allowed: remaining 0, delay 0s, reset in 200ms
}

func ExampleNew_multipleRules() {
	// 2 per second and 3 per minute, checked atomically: a denial by one rule
	// takes nothing from the other.
	show([]ratelimit.Rule{
		ratelimit.Named("per-second", ratelimit.FixedWindow{Limit: 2, Window: time.Second}),
		ratelimit.Named("per-minute", ratelimit.FixedWindow{Limit: 3, Window: time.Minute}),
	}, 0, 0, 0, time.Second, time.Second)
	// Output:
	// allowed: remaining 1, delay 0s, reset in 1s
	// allowed: remaining 0, delay 0s, reset in 1s
	// denied by rule 0 "per-second": retry in 1s
	// allowed: remaining 0, delay 0s, reset in 59s
	// denied by rule 1 "per-minute": retry in 58s
}

func ExampleConcurrencyLimiter() {
	mem := backend.NewMemory()
	defer mem.Close()
	cl, _ := ratelimit.NewConcurrency(mem, ratelimit.Concurrency{Limit: 1, Lease: time.Minute})
	ctx := context.Background()
	release, r, _ := cl.Acquire(ctx, "upload:alice")
	fmt.Println("first:", r.Allowed)
	_, r, _ = cl.Acquire(ctx, "upload:alice")
	fmt.Println("second while the first runs:", r.Allowed)
	_ = release(ctx)
	_, r, _ = cl.Acquire(ctx, "upload:alice")
	fmt.Println("after release:", r.Allowed)
	// Output:
	// first: true
	// second while the first runs: false
	// after release: true
}
