package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// TestTenSecondPeriod: "1,000 per 10 s" with every algorithm on every
// backend, from 3 s into a 10 s window (t0 is a multiple of 10 s since the
// Unix epoch): the budget comes back after the period, not after a second.
// A fixed window ends at the next multiple of its Window since the epoch;
// a sliding window's 1 s buckets hold a unit until the end of the bucket 10 s
// after it; the log, the buckets and GCRA give it back 10 s after it was
// spent. The same steps at the same fake times on every backend.
func TestTenSecondPeriod(t *testing.T) {
	const s = time.Second
	start := t0.Add(3 * s)
	tables := []table{
		{"fixed window", []ratelimit.Rule{ratelimit.FixedWindow{Limit: 1000, Window: 10 * s}}, []step{
			{0, 1000, allowed(1000, 0, 7*s)},
			{0, 1, denied(1000, 0, 7*s, 7*s)},
			{s, 1, denied(1000, 0, 6*s, 6*s)}, // a one-second window would admit here
			{5*s + 999*ms, 1, denied(1000, 0, ms, ms)},
			{ms, 1000, allowed(1000, 0, 10*s)}, // t0+10s: the next window
			{10 * s, 0, allowed(1000, 1000, 0)},
		}},
		{"sliding window", []ratelimit.Rule{ratelimit.SlidingWindow{Limit: 1000, Window: 10 * s}}, []step{
			{0, 1000, allowed(1000, 0, 11*s)},
			{0, 1, denied(1000, 0, 11*s, 11*s)},
			{s, 1, denied(1000, 0, 10*s, 10*s)},
			{10 * s, 1000, allowed(1000, 0, 11*s)},
		}},
		{"sliding log", []ratelimit.Rule{ratelimit.SlidingLog{Limit: 1000, Window: 10 * s}}, []step{
			{0, 1000, allowed(1000, 0, 10*s)},
			{0, 1, denied(1000, 0, 10*s, 10*s)},
			{s, 1, denied(1000, 0, 9*s, 9*s)},
			{9*s - us, 1, denied(1000, 0, us, us)},
			{us, 1000, allowed(1000, 0, 10*s)},
		}},
		{"token bucket", []ratelimit.Rule{ratelimit.TokenBucket{Capacity: 1000, Refill: 1000, Every: 10 * s}}, []step{
			{0, 1000, allowed(1000, 0, 10*s)},
			{0, 2, denied(1000, 0, 20*ms, 10*s)}, // a token per 10 ms
			{s, 1000, denied(1000, 100, 9*s, 9*s)},
			{9 * s, 1000, allowed(1000, 0, 10*s)},
		}},
		{"leaky bucket", []ratelimit.Rule{ratelimit.LeakyBucket{Rate: 1000, Per: 10 * s, Burst: 999, Delay: ratelimit.NoDelay}}, []step{
			{0, 1000, allowed(1000, 0, 10*s)},
			{0, 2, denied(1000, 0, 20*ms, 10*s)},
			{s, 1000, denied(1000, 100, 9*s, 9*s)},
			{9 * s, 1000, allowed(1000, 0, 10*s)},
		}},
		{"gcra", []ratelimit.Rule{ratelimit.GCRA{Rate: 1000, Per: 10 * s, Burst: 1000}}, []step{
			{0, 1000, allowed(1000, 0, 10*s)},
			{0, 2, denied(1000, 0, 20*ms, 10*s)},
			{s, 1000, denied(1000, 100, 9*s, 9*s)},
			{9 * s, 1000, allowed(1000, 0, 10*s)},
		}},
	}
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			for _, tb := range tables {
				t.Run(tb.name, func(t *testing.T) {
					clk := clock.NewFake(start)
					lim, err := ratelimit.New(bk.make(t, clk), tb.rules...)
					if err != nil {
						t.Fatal(err)
					}
					for i, st := range tb.steps {
						clk.Advance(st.advance)
						got, err := lim.AllowN(context.Background(), "user-42", st.n)
						if err != nil {
							t.Fatalf("step %d: %v", i+1, err)
						}
						if got != st.want {
							t.Errorf("step %d (t=+%v, n=%d):\n got %+v\nwant %+v", i+1, clk.Now().Sub(start), st.n, got, st.want)
						}
					}
				})
			}
		})
	}
}
