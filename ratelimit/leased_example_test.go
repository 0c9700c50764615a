package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// Two processes share a hot key's budget of 100 per second through leases:
// each takes units in one store call and admits from them in process. Here
// they share a Memory backend and a fake clock; in production each has its
// own backend.NewRedis on the same Redis.
func ExampleNewLeased() {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	mem := backend.NewMemory(backend.WithClock(clk))
	defer mem.Close()
	rule := ratelimit.FixedWindow{Limit: 100, Window: time.Second}
	var procs []*ratelimit.Leased
	for range 2 {
		lim, err := ratelimit.New(mem, rule)
		if err != nil {
			fmt.Println(err)
			return
		}
		// Leases of at most 10 units (a tenth of the limit), sized to last
		// about 100 ms at the rate each process sees.
		l, err := ratelimit.NewLeased(lim, ratelimit.LeaseFraction(0.1), ratelimit.LeaseTarget(100*time.Millisecond))
		if err != nil {
			fmt.Println(err)
			return
		}
		procs = append(procs, l)
	}
	admitted := 0
	for i := range 300 { // 300 requests in 300 ms, alternating between the processes
		clk.Advance(time.Millisecond)
		r, err := procs[i%2].Allow(ctx, "api:hot")
		if err != nil {
			fmt.Println(err)
			return
		}
		if r.Allowed {
			admitted++
		}
	}
	var calls, decisions int64
	for _, l := range procs {
		st := l.Stats()
		calls += st.Grants + st.Denied + st.GiveBacks
		decisions += st.Decisions
		if err := l.Close(ctx); err != nil { // give back what is left
			fmt.Println(err)
		}
	}
	fmt.Printf("admitted %d of 300 (the limit is 100 per second)\n", admitted)
	fmt.Printf("%d store calls for %d decisions\n", calls, decisions)
	// Output:
	// admitted 100 of 300 (the limit is 100 per second)
	// 14 store calls for 300 decisions
}
