package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// ExampleLimiter_Charge meters an LLM-like call whose cost, the tokens it
// used, is known only when it returns: check before the call with
// AllowN(ctx, key, 0), which spends nothing, and charge the tokens after it,
// past the budget if need be. A user in debt waits until it is paid back.
func ExampleLimiter_Charge() {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	mem := backend.NewMemory(backend.WithClock(clk))
	defer mem.Close()
	// 6,000 tokens a minute (100 a second) per user, at most 1,000 at once.
	lim, err := ratelimit.New(mem, ratelimit.TokenBucket{Capacity: 1000, Refill: 6000, Every: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	complete := func(user string, tokens int64) {
		if r, err := lim.AllowN(ctx, user, 0); err != nil || !r.Allowed {
			fmt.Printf("%s: 429, %d tokens in debt, retry in %v\n", user, r.Debt, r.RetryAfter)
			return
		}
		// ... call the model: it used tokens ...
		r, err := lim.Charge(ctx, user, tokens)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: used %d tokens, %d left, %d in debt\n", user, tokens, r.Remaining, r.Debt)
	}
	complete("bob", 600)
	complete("bob", 700) // more than was left: charged all the same
	complete("bob", 100)
	clk.Advance(5 * time.Second) // 500 tokens paid back the 300 of debt and refilled 200
	complete("bob", 150)
	// Output:
	// bob: used 600 tokens, 400 left, 0 in debt
	// bob: used 700 tokens, 0 left, 300 in debt
	// bob: 429, 300 tokens in debt, retry in 3s
	// bob: used 150 tokens, 50 left, 0 in debt
}
