package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/redis/go-redis/v9"
)

func main() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()

	b, err := backend.NewRedis(rdb)
	if err != nil {
		log.Fatal(err) // a nil client or an invalid option, named
	}
	// Both rules are decided in one script call: a denied request consumes
	// nothing from either.
	lim, err := ratelimit.New(b,
		ratelimit.Named("burst", ratelimit.GCRA{Rate: 10, Per: time.Second, Burst: 20}),
		ratelimit.Named("daily", ratelimit.FixedWindow{Limit: 10000, Window: 24 * time.Hour}),
	)
	if err != nil {
		log.Fatal(err) // a rule is invalid; the error names the field
	}

	res, err := lim.Allow(ctx, "user:42")
	if err != nil {
		log.Fatal(err) // Redis unreachable: your fail-open or fail-closed policy
	}
	if !res.Allowed {
		fmt.Printf("denied by %s, retry in %v\n", res.RuleName, res.RetryAfter)
		return
	}
	fmt.Printf("allowed, %d left under %s\n", res.Remaining, res.RuleName)
}
