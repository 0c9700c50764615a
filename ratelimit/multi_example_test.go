package ratelimit_test

import (
	"context"
	"fmt"
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
