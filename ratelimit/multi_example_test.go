package ratelimit_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// A request that must pass a per-user and a per-route limit: when the user is
// over its limit, the route's budget is not consumed either.
func ExampleAllowAll() {
	clk := clock.NewFake(time.Unix(1_699_999_980, 0)) // on a minute boundary
	mem := backend.NewMemory(backend.WithClock(clk))
	defer mem.Close()
	perUser, err := ratelimit.New(mem, ratelimit.FixedWindow{Limit: 2, Window: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	perRoute, err := ratelimit.New(mem, ratelimit.TokenBucket{Capacity: 10, Refill: 10, Every: time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	reqs := []ratelimit.Request{
		{Limiter: perUser, Key: "user:alice", N: 1},
		{Limiter: perRoute, Key: "route:/search", N: 1},
	}
	results := make([]ratelimit.Result, len(reqs))
	for range 3 {
		allowed, err := ratelimit.AllowAll(context.Background(), reqs, results)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("allowed %v\n", allowed)
		for i, r := range results {
			switch {
			case r.Allowed:
				fmt.Printf("  %s: remaining %d\n", reqs[i].Key, r.Remaining)
			case r.RetryAfter != 0:
				fmt.Printf("  %s: over its limit, retry in %v\n", reqs[i].Key, r.RetryAfter)
			default:
				fmt.Printf("  %s: not consumed, remaining %d\n", reqs[i].Key, r.Remaining)
			}
		}
	}
	// Output:
	// allowed true
	//   user:alice: remaining 1
	//   route:/search: remaining 9
	// allowed true
	//   user:alice: remaining 0
	//   route:/search: remaining 8
	// allowed false
	//   user:alice: over its limit, retry in 1m0s
	//   route:/search: not consumed, remaining 8
}

// Each rule's own answer, as the IETF RateLimit header fields of several
// policies: one field member per rule, with its quota, window, remaining
// units and seconds to reset.
func ExampleLimiter_AllowNEach() {
	clk := clock.NewFake(time.Unix(1_699_999_980, 0)) // on a minute boundary
	mem := backend.NewMemory(backend.WithClock(clk))
	defer mem.Close()
	windows := []time.Duration{time.Second, time.Minute}
	lim, err := ratelimit.New(mem,
		ratelimit.Named("persec", ratelimit.FixedWindow{Limit: 2, Window: windows[0]}),
		ratelimit.Named("permin", ratelimit.FixedWindow{Limit: 5, Window: windows[1]}))
	if err != nil {
		fmt.Println(err)
		return
	}
	each := make([]ratelimit.Result, lim.Rules())
	for range 3 {
		res, err := lim.AllowNEach(context.Background(), "alice", 1, each)
		if err != nil {
			fmt.Println(err)
			return
		}
		var policy, state []string
		for i, r := range each {
			policy = append(policy, fmt.Sprintf("%q;q=%d;w=%d", r.RuleName, r.Limit, int64(windows[i].Seconds())))
			state = append(state, fmt.Sprintf("%q;r=%d;t=%d", r.RuleName, r.Remaining, int64(math.Ceil(r.ResetAfter.Seconds()))))
		}
		fmt.Println("allowed:", res.Allowed)
		fmt.Println("  RateLimit-Policy:", strings.Join(policy, ", "))
		fmt.Println("  RateLimit:", strings.Join(state, ", "))
	}
	// Output:
	// allowed: true
	//   RateLimit-Policy: "persec";q=2;w=1, "permin";q=5;w=60
	//   RateLimit: "persec";r=1;t=1, "permin";r=4;t=60
	// allowed: true
	//   RateLimit-Policy: "persec";q=2;w=1, "permin";q=5;w=60
	//   RateLimit: "persec";r=0;t=1, "permin";r=3;t=60
	// allowed: false
	//   RateLimit-Policy: "persec";q=2;w=1, "permin";q=5;w=60
	//   RateLimit: "persec";r=0;t=1, "permin";r=3;t=60
}
