package fallback_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/ratelimit/fallback"
)

// A Limiter that keeps limiting in process, on its share of the limit,
// while its store fails. (On the memory backend, as here, the store never
// fails: every answer is the store's.)
func Example() {
	b := backend.NewMemory() // backend.NewRedis(client) in production
	defer b.Close()
	lim, err := ratelimit.New(b, ratelimit.FixedWindow{Limit: 2, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	f, err := fallback.New(lim, fallback.Options{
		Mode:    fallback.Degraded,
		Servers: func() int { return 1 }, // the processes sharing the store
		Timeout: 50 * time.Millisecond,   // each store call's bound
	})
	if err != nil {
		panic(err)
	}
	defer f.Close()
	for range 3 {
		res, err := f.Allow(context.Background(), "user:42")
		if err != nil {
			panic(err) // the caller's context ended, or an invalid key
		}
		fmt.Println(res.Allowed, res.Fallback)
	}
	// Output:
	// true false
	// true false
	// false false
}

// The processes that share a store count each other by heartbeats in it,
// so that each takes its share of every limit while the store fails.
func ExampleCountServers() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()             // stops this process's heartbeats
	b := backend.NewMemory() // backend.NewRedis(client) in production
	defer b.Close()
	lim, err := ratelimit.New(b, ratelimit.FixedWindow{Limit: 100, Window: time.Second})
	if err != nil {
		panic(err)
	}
	servers := fallback.CountServers(ctx, b) // once per process and store
	f, err := fallback.New(lim, fallback.Options{Mode: fallback.Degraded, Servers: servers, Timeout: 50 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	defer f.Close()
	fmt.Println(servers()) // the memory backend is this process's alone
	// Output: 1
}
