// Command ratelimit shows floodgate's rate limiters deciding a burst of
// requests on the embedded memory backend — no Redis needed:
//
//	go run ./examples/ratelimit
//
// With -redis it runs the same rules on a Redis server instead:
//
//	go run ./examples/ratelimit -redis localhost:6379
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

func main() {
	addr := flag.String("redis", "", "Redis address (host:port); empty for the in-process memory backend")
	requests := flag.Int("n", 12, "requests per rule, sent 50ms apart")
	flag.Parse()

	var b backend.Backend = backend.NewMemory()
	where := "memory"
	if *addr != "" {
		c := redis.NewClient(&redis.Options{Addr: *addr, ContextTimeoutEnabled: true})
		defer c.Close()
		rb, err := backend.NewRedis(c)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		b = rb
		where = "redis " + *addr
	}

	rules := []ratelimit.Rule{
		ratelimit.FixedWindow{Limit: 5, Window: time.Second},
		ratelimit.SlidingWindow{Limit: 5, Window: time.Second, Buckets: 10},
		ratelimit.SlidingLog{Limit: 5, Window: time.Second},
		ratelimit.TokenBucket{Capacity: 5, Refill: 5, Every: time.Second},
		ratelimit.LeakyBucket{Rate: 5, Per: time.Second, Burst: 4, Delay: 2},
		ratelimit.GCRA{Rate: 5, Per: time.Second, Burst: 5},
	}
	ctx := context.Background()
	fmt.Printf("floodgate on %s: %d requests, one every 50ms, per rule\n\n", where, *requests)
	for _, rule := range rules {
		lim, err := ratelimit.New(b, rule)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		key := fmt.Sprintf("example:%d", time.Now().UnixNano())
		fmt.Printf("%T %+v\n", rule, rule)
		for i := range *requests {
			r, err := lim.Allow(ctx, key)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			verdict := "denied "
			if r.Allowed {
				verdict = "allowed"
			}
			fmt.Printf("  #%-2d %s remaining=%d retry_after=%v reset_after=%v delay=%v\n", i+1, verdict,
				r.Remaining, r.RetryAfter.Round(time.Millisecond), r.ResetAfter.Round(time.Millisecond), r.Delay.Round(time.Millisecond))
			time.Sleep(50 * time.Millisecond)
		}
		fmt.Println()
	}
}
