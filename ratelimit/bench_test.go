package ratelimit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// Memory-backend benchmarks; bench/ compares Redis and memory against peers.
func BenchmarkMemory(b *testing.B) {
	rules := map[string]ratelimit.Rule{
		"gcra":           ratelimit.GCRA{Rate: 1e9, Per: time.Second, Burst: 1e6},
		"token_bucket":   ratelimit.TokenBucket{Capacity: 1e6, Refill: 1e9, Every: time.Second},
		"fixed_window":   ratelimit.FixedWindow{Limit: 1e12, Window: time.Second},
		"sliding_window": ratelimit.SlidingWindow{Limit: 1e12, Window: time.Second},
	}
	for name, rule := range rules {
		for _, keys := range []int{1, 100000} {
			b.Run(name+"/keys="+strconv.Itoa(keys), func(b *testing.B) {
				m := backend.NewMemory()
				defer m.Close()
				lim, err := ratelimit.New(m, rule)
				if err != nil {
					b.Fatal(err)
				}
				names := make([]string, keys)
				for i := range names {
					names[i] = "user:" + strconv.Itoa(i)
				}
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						if _, err := lim.Allow(ctx, names[i%keys]); err != nil {
							b.Fatal(err)
						}
						i += 7919
					}
				})
			})
		}
	}
}
