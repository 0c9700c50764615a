package ratelimit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// BenchmarkHotKey decides one hot key from 4 processes (each its own
// Limiter and, on Redis, its own client), with and without leases. Besides
// ns/op it reports calls/op, the store calls per decision, and admit/bound,
// the units admitted over the exact bound of the elapsed time: the rules
// are tight enough that every variant runs out of budget, so 1 is exact
// admission and the rest under-admission (but for gcra_loose, which never
// runs out). Compare runs with benchstat; the
// ratio of decisions/s with and without leases is the point, not the
// figures of one machine.
func BenchmarkHotKey(b *testing.B) {
	type ruleCase struct {
		name  string
		rule  ratelimit.Rule
		bound func(start, end time.Time) float64
	}
	rules := []ruleCase{
		{"fixed_window", ratelimit.FixedWindow{Limit: 1000, Window: 100 * time.Millisecond}, func(s, e time.Time) float64 {
			w := int64(100 * time.Millisecond / time.Microsecond)
			return 1000 * float64(e.UnixMicro()/w-s.UnixMicro()/w+1)
		}},
		{"gcra", ratelimit.GCRA{Rate: 10000, Per: time.Second, Burst: 1000}, func(s, e time.Time) float64 {
			return 1000 + 10000*e.Sub(s).Seconds()
		}},
		// Never runs out: every decision is admitted (no admit/bound).
		{"gcra_loose", ratelimit.GCRA{Rate: 1e9, Per: time.Second, Burst: 1e7}, nil},
	}
	const P = 4
	for _, bk := range []string{"memory", "redis"} {
		for _, rc := range rules {
			for _, leased := range []bool{false, true} {
				name := bk + "/" + rc.name + "/limiter"
				if leased {
					name = bk + "/" + rc.name + "/leased"
				}
				b.Run(name, func(b *testing.B) {
					ctx := context.Background()
					var mem *backend.Memory
					var rc0 *redis.Client
					prefix := uniquePrefix(b)
					allow := make([]func() (bool, error), P)
					var stats []*ratelimit.Leased
					for i := range allow {
						var be backend.Backend
						if bk == "memory" {
							if mem == nil {
								mem = backend.NewMemory()
								b.Cleanup(func() { mem.Close() })
							}
							be = mem
						} else {
							c := redis.NewClient(&redis.Options{Addr: testenv.SharedRedis(b).Addr})
							b.Cleanup(func() { c.Close() })
							rc0 = c
							r, err := backend.NewRedis(c, backend.WithPrefix(prefix))
							if err != nil {
								b.Fatal(err)
							}
							be = r
						}
						lim, err := ratelimit.New(be, rc.rule)
						if err != nil {
							b.Fatal(err)
						}
						if !leased {
							allow[i] = func() (bool, error) { r, err := lim.Allow(ctx, "hot"); return r.Allowed, err }
							continue
						}
						l, err := ratelimit.NewLeased(lim)
						if err != nil {
							b.Fatal(err)
						}
						stats = append(stats, l)
						allow[i] = func() (bool, error) { r, err := l.Allow(ctx, "hot"); return r.Allowed, err }
					}
					now := func() time.Time {
						if rc0 == nil {
							return time.Now()
						}
						t, err := rc0.Time(ctx).Result()
						if err != nil {
							b.Fatal(err)
						}
						return t
					}
					var next, admitted atomic.Int64
					b.ReportAllocs()
					b.SetParallelism(16) // Redis calls wait on the network: 32 callers on 2 cores
					start := now()
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						f := allow[next.Add(1)%P]
						var n int64
						for pb.Next() {
							ok, err := f()
							if err != nil {
								b.Error(err)
								return
							}
							if ok {
								n++
							}
						}
						admitted.Add(n)
					})
					b.StopTimer()
					end := now()
					if rc.bound != nil {
						b.ReportMetric(float64(admitted.Load())/rc.bound(start, end), "admit/bound")
					}
					calls := float64(b.N)
					if leased {
						calls = 0
						for _, l := range stats {
							st := l.Stats()
							calls += float64(st.Grants + st.Denied + st.GiveBacks)
						}
					}
					b.ReportMetric(calls/float64(b.N), "calls/op")
				})
			}
		}
	}
}
