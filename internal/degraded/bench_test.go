package degraded

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// BenchmarkSeen remembers a store answer of one rule, as the decision
// server does for every decision while the store answers.
func BenchmarkSeen(b *testing.B) {
	l := New(Options{})
	defer l.Close()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "key:" + strconv.Itoa(i)
	}
	reqs := []ratelimit.Request{{}}
	res := []ratelimit.Result{{Allowed: true, ResetAfter: time.Minute}}
	start := time.Now()
	b.ReportAllocs()
	for i := range b.N {
		reqs[0].Key, res[0].Remaining = keys[i%len(keys)], int64(100-i%100)
		l.Seen(reqs, res, nil, start)
	}
}

// BenchmarkDecide decides in process, on limits of one rule (the decision
// server's) and of two.
func BenchmarkDecide(b *testing.B) {
	for _, c := range []struct {
		name  string
		rules []ratelimit.Rule
	}{
		{"rules=1", []ratelimit.Rule{ratelimit.FixedWindow{Limit: 1e9, Window: time.Hour}}},
		{"rules=2", []ratelimit.Rule{ratelimit.FixedWindow{Limit: 1e9, Window: time.Hour}, ratelimit.GCRA{Rate: 1e9, Per: time.Second, Burst: 1e6}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			mem := backend.NewMemory()
			defer mem.Close()
			store, err := ratelimit.New(mem, c.rules...)
			if err != nil {
				b.Fatal(err)
			}
			l := New(Options{})
			defer l.Close()
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = "key:" + strconv.Itoa(i)
			}
			rules, windows := [][]ratelimit.Rule{c.rules}, []time.Duration{time.Hour}
			reqs := []ratelimit.Request{{Limiter: store, N: 1}}
			res := make([]ratelimit.Result, 1)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				reqs[0].Key = keys[i%len(keys)]
				if _, err := l.Decide(ctx, reqs, rules, windows, res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
