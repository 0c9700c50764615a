package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// step is one call of a step table: move the fake clock by advance, call
// AllowN(n), and demand want exactly.
type step struct {
	advance time.Duration
	n       int64
	want    ratelimit.Result
}

type table struct {
	name  string
	rules []ratelimit.Rule
	steps []step
}

const (
	ms = time.Millisecond
	us = time.Microsecond
)

func allowed(limit, remaining int64, reset time.Duration) ratelimit.Result {
	return ratelimit.Result{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

func denied(limit, remaining int64, retry, reset time.Duration) ratelimit.Result {
	return ratelimit.Result{Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

func (r step) rule(i int, name string) step {
	r.want.Rule, r.want.RuleName = i, name
	return r
}

func (r step) delay(d time.Duration) step {
	r.want.Delay = d
	return r
}

// tables hold hand-computed decisions; every backend must reproduce them.
var tables = []table{
	{"fixed window", []ratelimit.Rule{ratelimit.FixedWindow{Limit: 3, Window: time.Second}}, []step{
		{0, 1, allowed(3, 2, time.Second)},
		{100 * ms, 1, allowed(3, 1, 900*ms)},
		{100 * ms, 1, allowed(3, 0, 800*ms)},
		{100 * ms, 1, denied(3, 0, 700*ms, 700*ms)},
		{0, 0, allowed(3, 0, 700*ms)},
		{700 * ms, 2, allowed(3, 1, time.Second)},
		{0, 4, denied(3, 1, -1, time.Second)},
		{0, 2, denied(3, 1, time.Second, time.Second)},
		{time.Second, 0, allowed(3, 3, 0)},
	}},
	{"sliding window", []ratelimit.Rule{ratelimit.SlidingWindow{Limit: 4, Window: time.Second, Buckets: 4}}, []step{
		{0, 2, allowed(4, 2, 1250*ms)},
		{300 * ms, 1, allowed(4, 1, 1200*ms)},
		{0, 2, denied(4, 1, 950*ms, 1200*ms)},
		{950 * ms, 2, allowed(4, 1, 1250*ms)},
		{0, 0, allowed(4, 1, 1250*ms)},
		{2000 * ms, 0, allowed(4, 4, 0)},
		{0, 5, denied(4, 4, -1, 0)},
	}},
	{"sliding log, two rules in one log", []ratelimit.Rule{
		ratelimit.SlidingLog{Limit: 3, Window: time.Second},
		ratelimit.SlidingLog{Limit: 2, Window: 100 * ms},
	}, []step{
		step{0, 1, allowed(2, 1, 100*ms)}.rule(1, ""),
		step{10 * ms, 1, allowed(2, 0, 100*ms)}.rule(1, ""),
		step{10 * ms, 1, denied(2, 0, 80*ms, 90*ms)}.rule(1, ""),
		{80 * ms, 1, allowed(3, 0, time.Second)},
		{0, 1, denied(3, 0, 900*ms, time.Second)},
		{900 * ms, 1, allowed(3, 0, time.Second)},
	}},
	{"token bucket", []ratelimit.Rule{ratelimit.TokenBucket{Capacity: 3, Refill: 1, Every: 300 * ms}}, []step{
		{0, 1, allowed(3, 2, 300*ms)},
		{0, 2, allowed(3, 0, 900*ms)},
		{0, 1, denied(3, 0, 300*ms, 900*ms)},
		{100 * ms, 1, denied(3, 0, 200*ms, 800*ms)},
		{200 * ms, 1, allowed(3, 0, 900*ms)},
		{0, 4, denied(3, 0, -1, 900*ms)},
		{900 * ms, 0, allowed(3, 3, 0)},
	}},
	{"gcra, exact at a third of a second", []ratelimit.Rule{ratelimit.GCRA{Rate: 3, Per: time.Second, Burst: 2}}, []step{
		{0, 1, allowed(2, 1, 333334*us)},
		{0, 1, allowed(2, 0, 666667*us)},
		{0, 1, denied(2, 0, 333334*us, 666667*us)},
		{333333 * us, 1, denied(2, 0, 1*us, 333334*us)},
		{1 * us, 1, allowed(2, 0, 666666*us)},
	}},
	{"leaky bucket, burst 2 delay 1", []ratelimit.Rule{ratelimit.LeakyBucket{Rate: 2, Per: time.Second, Burst: 2, Delay: 1}}, []step{
		{0, 1, allowed(3, 2, 500*ms)},
		{0, 1, allowed(3, 1, time.Second)},
		step{0, 1, allowed(3, 0, 1500*ms)}.delay(500 * ms),
		{0, 1, denied(3, 0, 500*ms, 1500*ms)},
		step{500 * ms, 1, allowed(3, 0, 1500*ms)}.delay(500 * ms),
	}},
	{"leaky bucket, nginx default delay 0", []ratelimit.Rule{ratelimit.LeakyBucket{Rate: 2, Per: time.Second, Burst: 2}}, []step{
		{0, 1, allowed(3, 2, 500*ms)},
		step{0, 1, allowed(3, 1, time.Second)}.delay(500 * ms),
		step{0, 1, allowed(3, 0, 1500*ms)}.delay(time.Second),
		{0, 1, denied(3, 0, 500*ms, 1500*ms)},
	}},
	{"leaky bucket, nodelay", []ratelimit.Rule{ratelimit.LeakyBucket{Rate: 2, Per: time.Second, Burst: 2, Delay: ratelimit.NoDelay}}, []step{
		{0, 1, allowed(3, 2, 500*ms)},
		{0, 1, allowed(3, 1, time.Second)},
		{0, 1, allowed(3, 0, 1500*ms)},
		{0, 1, denied(3, 0, 500*ms, 1500*ms)},
	}},
	{"multi-rule: a denial consumes nothing", []ratelimit.Rule{
		ratelimit.Named("per-second", ratelimit.FixedWindow{Limit: 2, Window: time.Second}),
		ratelimit.Named("bucket", ratelimit.TokenBucket{Capacity: 3, Refill: 1, Every: time.Second}),
	}, []step{
		step{0, 1, allowed(2, 1, time.Second)}.rule(0, "per-second"),
		step{0, 1, allowed(2, 0, time.Second)}.rule(0, "per-second"),
		step{0, 1, denied(2, 0, time.Second, time.Second)}.rule(0, "per-second"),
		// Had step 3 taken a token, the bucket would deny here.
		step{time.Second, 2, allowed(2, 0, time.Second)}.rule(0, "per-second"),
		step{time.Second, 2, denied(3, 1, time.Second, 2*time.Second)}.rule(1, "bucket"),
		// Had step 5 counted in the window, it would deny here.
		step{0, 1, allowed(3, 0, 3*time.Second)}.rule(1, "bucket"),
	}},
}

func TestConformance(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			for _, tb := range tables {
				t.Run(tb.name, func(t *testing.T) {
					clk := clock.NewFake(t0)
					lim, err := ratelimit.New(bk.make(t, clk), tb.rules...)
					if err != nil {
						t.Fatal(err)
					}
					for i, s := range tb.steps {
						clk.Advance(s.advance)
						got, err := lim.AllowN(context.Background(), "user-42", s.n)
						if err != nil {
							t.Fatalf("step %d: %v", i+1, err)
						}
						if got != s.want {
							t.Errorf("step %d (t=%v, n=%d):\n got %+v\nwant %+v", i+1, clk.Now().Sub(t0), s.n, got, s.want)
						}
					}
				})
			}
		})
	}
}

func TestConformanceReset(t *testing.T) {
	rules := [][]ratelimit.Rule{
		{ratelimit.FixedWindow{Limit: 2, Window: time.Minute}},
		{ratelimit.SlidingWindow{Limit: 2, Window: time.Minute}},
		{ratelimit.SlidingLog{Limit: 2, Window: time.Minute}},
		{ratelimit.TokenBucket{Capacity: 2, Refill: 1, Every: time.Minute}},
		{ratelimit.LeakyBucket{Rate: 1, Per: time.Minute, Burst: 1}},
		{ratelimit.GCRA{Rate: 1, Per: time.Minute, Burst: 2}},
	}
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			for _, rs := range rules {
				clk := clock.NewFake(t0)
				lim, err := ratelimit.New(bk.make(t, clk), rs...)
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				for range 2 {
					if r, _ := lim.Allow(ctx, "k"); !r.Allowed {
						t.Fatalf("%T: first two calls must pass", rs[0])
					}
				}
				if r, _ := lim.Allow(ctx, "k"); r.Allowed {
					t.Fatalf("%T: third call must be denied", rs[0])
				}
				if r, _ := lim.Allow(ctx, "other"); !r.Allowed {
					t.Fatalf("%T: another key must have its own budget", rs[0])
				}
				if err := lim.Reset(ctx, "k"); err != nil {
					t.Fatal(err)
				}
				r, err := lim.AllowN(ctx, "k", 0)
				if err != nil {
					t.Fatal(err)
				}
				if r.Remaining != 2 || r.ResetAfter != 0 {
					t.Errorf("%T: after Reset got %+v, want Remaining 2 and ResetAfter 0", rs[0], r)
				}
			}
		})
	}
}

func TestConformanceConcurrency(t *testing.T) {
	// On "redis-replay" every script call runs twice, as a client's resend
	// after a lost reply does: the lease id is the caller's, so a replayed
	// acquire holds one slot, not two, and answers as the first run did.
	replay := kindOfBackend{"redis-replay", func(t testing.TB, clk clock.Clock) backend.Backend {
		b, _ := backendtest.Replaying(t, clk)
		return b
	}}
	for _, bk := range append(allBackends(), replay) {
		t.Run(bk.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			cl, err := ratelimit.NewConcurrency(bk.make(t, clk), ratelimit.Concurrency{Limit: 2, Lease: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			acquire := func(want ratelimit.Result) func(context.Context) error {
				t.Helper()
				rel, got, err := cl.Acquire(ctx, "conn")
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("got %+v\nwant %+v", got, want)
				}
				return rel
			}
			rel1 := acquire(allowed(2, 1, time.Second))
			clk.Advance(100 * ms)
			rel2 := acquire(allowed(2, 0, time.Second))
			clk.Advance(100 * ms)
			acquire(denied(2, 0, 800*ms, 900*ms))
			if err := rel1(ctx); err != nil {
				t.Fatal(err)
			}
			if err := rel1(ctx); err != nil {
				t.Fatalf("second release: %v", err)
			}
			acquire(allowed(2, 0, time.Second))
			clk.Advance(time.Second) // both live leases have expired: a dead holder's slot comes back
			acquire(allowed(2, 1, time.Second))
			if err := rel2(ctx); err != nil {
				t.Fatalf("release after expiry: %v", err)
			}
			acquire(allowed(2, 0, time.Second))
			acquire(denied(2, 0, time.Second, time.Second))
		})
	}
}
