package ratelimit_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// TestLeasedMemoryEqualsRedis runs the same random calls of P processes on
// Memory and on Redis, each on a fake clock, and demands the same Result
// from every call: grants, spending from leases, give-backs and their
// refunds are one behaviour on both backends.
func TestLeasedMemoryEqualsRedis(t *testing.T) {
	const P = 3
	for _, rc := range leasableRules() {
		t.Run(rc.name, func(t *testing.T) {
			rs := []ratelimit.Rule{rc.rule}
			if rc.name == "fixed_and_gcra" {
				rs = []ratelimit.Rule{rc.rule, ratelimit.GCRA{Rate: 1, Per: time.Second, Burst: 100}, ratelimit.SlidingWindow{Limit: 170, Window: 100 * time.Second, Buckets: 5}}
			}
			for seed := range uint64(3) {
				clkM, clkR := clock.NewFake(t0), clock.NewFake(t0)
				opts := []ratelimit.LeaseOption{ratelimit.LeaseSize(1, 8), ratelimit.LeaseFraction(1), ratelimit.LeaseTarget(10 * time.Second)}
				mem := processes(t, "memory", clkM, P, rs, opts...)
				red := processes(t, "redis", clkR, P, rs, opts...)
				rng := rand.New(rand.NewPCG(seed, 7))
				ctx := context.Background()
				for step := range 1500 {
					d := time.Duration(rng.IntN(50)) * ms
					if rng.IntN(100) == 0 {
						d = time.Duration(rng.IntN(40000)) * ms
					}
					clkM.Advance(d)
					clkR.Advance(d)
					p := rng.IntN(P)
					if rng.IntN(15) == 0 {
						if err := mem[p].Release(ctx, "k"); err != nil {
							t.Fatal(err)
						}
						if err := red[p].Release(ctx, "k"); err != nil {
							t.Fatal(err)
						}
						continue
					}
					n := int64(1 + rng.IntN(3))
					if rng.IntN(20) == 0 {
						n = 0
					}
					gm, err := mem[p].AllowN(ctx, "k", n)
					if err != nil {
						t.Fatal(err)
					}
					gr, err := red[p].AllowN(ctx, "k", n)
					if err != nil {
						t.Fatal(err)
					}
					if gm != gr {
						t.Fatalf("seed %d step %d (t=%v, process %d, n=%d):\nmemory %+v\nredis  %+v", seed, step, clkM.Now().Sub(t0), p, n, gm, gr)
					}
				}
			}
		})
	}
}
