package counter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/counter"
)

// A daily sign-in sequence number: the n-th sign-in of the day gets n, and
// the count starts again at midnight UTC. On Redis the same code needs no
// lock: each Add is one atomic script call.
func ExampleWindow() {
	clk := clock.NewFake(time.Date(2026, 3, 1, 23, 59, 0, 0, time.UTC))
	mem := backend.NewMemory(backend.WithClock(clk))
	defer mem.Close()
	signins, err := counter.New(mem, "signins", counter.Window(24*time.Hour))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for _, user := range []string{"alice", "bob", "carol"} {
		n, _ := signins.Add(ctx, "site", 1)
		fmt.Printf("%s %s is sign-in #%d\n", clk.Now().Format("Jan 2 15:04"), user, n)
		clk.Advance(30 * time.Second)
	}
	// Output:
	// Mar 1 23:59 alice is sign-in #1
	// Mar 1 23:59 bob is sign-in #2
	// Mar 2 00:00 carol is sign-in #1
}

// A counter that lives ten minutes from its first Add, like a session's
// request count; later Adds do not extend it.
func ExampleTTL() {
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	mem := backend.NewMemory(backend.WithClock(clk))
	defer mem.Close()
	requests, err := counter.New(mem, "session-requests", counter.TTL(10*time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for _, step := range []time.Duration{0, 4 * time.Minute, 5 * time.Minute, time.Minute} {
		clk.Advance(step)
		n, _ := requests.Add(ctx, "session-9f2c", 1)
		info, _ := requests.Inspect(ctx, "session-9f2c")
		fmt.Printf("+%v: %d requests, expires in %v\n", clk.Now().Sub(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)), n, info.ResetAfter)
	}
	// Output:
	// +0s: 1 requests, expires in 10m0s
	// +4m0s: 2 requests, expires in 6m0s
	// +9m0s: 3 requests, expires in 1m0s
	// +10m0s: 1 requests, expires in 10m0s
}

// Batched absorbs a hot key locally and flushes the sums; Close sends what
// is left, so a graceful shutdown loses nothing.
func ExampleBatched() {
	mem := backend.NewMemory()
	defer mem.Close()
	views, err := counter.New(mem, "views")
	if err != nil {
		fmt.Println(err)
		return
	}
	batch, err := counter.NewBatched(views, time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 10000 {
		_ = batch.Add("/home", 1) // no round trip
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := batch.Close(ctx); err != nil {
		fmt.Println(err)
		return
	}
	n, _ := views.Get(ctx, "/home")
	fmt.Println(n, "views")
	// Output:
	// 10000 views
}
