package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// TestLeasedBursts: four processes lease one key whose requests come in
// bursts a tenth of the rule's period apart, every process's at the same
// instant, four times what the rule allows. Leasing admits at least 90% of
// what a plain Limiter, deciding every request in the store, admits of the
// same requests, and never a unit the rules do not allow: every admitted
// unit is fed, at its time, to an exact reference Limiter, which must admit
// it too.
//
// Time is scaled by 100 (a period of 100 s, bursts 10 s apart, LeaseTarget
// 5 s: the default 50 ms of a 1 s period), because Redis expires keys by its
// own clock (see leasableRules).
func TestLeasedBursts(t *testing.T) {
	const (
		P       = 4
		period  = 100 * time.Second
		every   = period / 10
		limit   = 1000               // per period
		perBurs = 4 * limit / 10 / P // each process's requests of one burst: 4× the limit in all
		bursts  = 200                // 20 periods
	)
	rules := []struct {
		name string
		rule ratelimit.Rule
	}{
		{"fixed_window", ratelimit.FixedWindow{Limit: limit, Window: period}},
		{"sliding_window", ratelimit.SlidingWindow{Limit: limit, Window: period, Buckets: 10}},
		{"token_bucket", ratelimit.TokenBucket{Capacity: limit / 10, Refill: limit / 100, Every: time.Second}},
		{"gcra", ratelimit.GCRA{Rate: limit / 100, Per: time.Second, Burst: limit / 10}},
		{"leaky_bucket_nodelay", ratelimit.LeakyBucket{Rate: limit / 100, Per: time.Second, Burst: limit/10 - 1, Delay: ratelimit.NoDelay}},
	}
	for _, bk := range []string{"memory", "redis"} {
		t.Run(bk, func(t *testing.T) {
			t.Parallel()
			for _, rc := range rules {
				t.Run(rc.name, func(t *testing.T) {
					ctx := context.Background()
					run := func(decide func(p int) bool, clk *clock.Fake) (admitted int64) {
						for b := range bursts {
							clk.Set(t0.Add(time.Duration(b) * every))
							for i := range perBurs * P {
								if decide(i % P) {
									admitted++
								}
							}
						}
						return admitted
					}

					// The plain Limiter: every request decided in the store.
					clk := clock.NewFake(t0)
					mem := backend.NewMemory(backend.WithClock(clk))
					defer mem.Close()
					plain, err := ratelimit.New(mem, rc.rule)
					if err != nil {
						t.Fatal(err)
					}
					exact := run(func(int) bool {
						r, err := plain.Allow(ctx, "hot")
						if err != nil {
							t.Fatal(err)
						}
						return r.Allowed
					}, clk)

					// The leases, checked unit by unit against a reference.
					clk = clock.NewFake(t0)
					ls := processes(t, bk, clk, P, []ratelimit.Rule{rc.rule}, ratelimit.LeaseTarget(every/2))
					refMem := backend.NewMemory(backend.WithClock(clk))
					defer refMem.Close()
					ref, err := ratelimit.New(refMem, rc.rule)
					if err != nil {
						t.Fatal(err)
					}
					leased := run(func(p int) bool {
						r, err := ls[p].Allow(ctx, "hot")
						if err != nil {
							t.Fatal(err)
						}
						if !r.Allowed {
							return false
						}
						got, err := ref.Allow(ctx, "hot")
						if err != nil {
							t.Fatal(err)
						}
						if !got.Allowed {
							t.Fatalf("t=%v: process %d admitted a unit the rule does not allow", clk.Now().Sub(t0), p)
						}
						return true
					}, clk)
					var grants int64
					for _, l := range ls {
						grants += l.Stats().Grants
					}
					t.Logf("%d requests in bursts %v apart: the plain Limiter admitted %d, the leases %d (%.1f%%) in %d grants",
						bursts*perBurs*P, every, exact, leased, 100*float64(leased)/float64(exact), grants)
					if leased < exact*9/10 {
						t.Errorf("leases admitted %d, under 90%% of the plain Limiter's %d", leased, exact)
					}
				})
			}
		})
	}
}
