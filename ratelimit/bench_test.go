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

// BenchmarkMultiRule decides a key against two rules, admitted and denied
// by the first (the second would admit), on Memory and on Redis (the
// generated fast path for fixed-window and drain rules, limits.lua for the
// others).
func BenchmarkMultiRule(b *testing.B) {
	rules := map[string][]ratelimit.Rule{
		"fast": {ratelimit.FixedWindow{Limit: 1e9, Window: time.Hour}, ratelimit.GCRA{Rate: 1e9, Per: time.Second, Burst: 1e6}},
		"lua":  {ratelimit.SlidingWindow{Limit: 1e9, Window: time.Hour}, ratelimit.FixedWindow{Limit: 1e12, Window: time.Hour}},
	}
	for _, kind := range []string{"memory", "redis"} {
		for name, rs := range rules {
			for _, outcome := range []string{"allowed", "denied"} {
				b.Run(kind+"/"+name+"/"+outcome, func(b *testing.B) {
					var bk backend.Backend
					if kind == "memory" {
						m := backend.NewMemory()
						b.Cleanup(func() { m.Close() })
						bk = m
					} else {
						bk = newRedis(b, nil)
					}
					lim, err := ratelimit.New(bk, rs...)
					if err != nil {
						b.Fatal(err)
					}
					ctx := context.Background()
					if outcome == "denied" {
						if _, err := lim.AllowN(ctx, "k", 1e9); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						if _, err := lim.Allow(ctx, "k"); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
