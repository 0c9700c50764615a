package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/redis/go-redis/v9"
)

// TestRedisStateEncoding: a single-rule GCRA, TokenBucket or FixedWindow
// keeps one Redis key whose value Redis stores as an integer (the smallest
// form) at common parameters, and falls back to text where the integer form
// cannot hold the state; either way the decisions are the memory backend's.
func TestRedisStateEncoding(t *testing.T) {
	ctx := context.Background()
	srv := testenv.SharedRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	cases := []struct {
		name     string
		rule     ratelimit.Rule
		n        int64
		encoding string
	}{
		{"gcra per second", ratelimit.GCRA{Rate: 100, Per: time.Second, Burst: 200}, 3, "int"},
		{"token bucket per minute", ratelimit.TokenBucket{Capacity: 50, Refill: 10, Every: time.Minute}, 2, "int"},
		{"leaky bucket", ratelimit.LeakyBucket{Rate: 5, Per: time.Second, Burst: 10, Delay: 2}, 4, "int"},
		{"fixed window per hour", ratelimit.FixedWindow{Limit: 1000, Window: time.Hour}, 7, "int"},
		{"fixed window per day", ratelimit.FixedWindow{Limit: 1 << 40, Window: 24 * time.Hour}, 1 << 33, "int"},
		// A level of 3 hours of units (µs): beyond the integer form's 10^10.
		{"token bucket per hour", ratelimit.TokenBucket{Capacity: 10, Refill: 1, Every: time.Hour}, 3, "embstr"},
		{"fixed window, huge count", ratelimit.FixedWindow{Limit: 1 << 50, Window: time.Hour}, 1 << 40, "embstr"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A clock off the whole second, so that the integer form has to
			// move the time back to it.
			start := t0.Add(123_457 * time.Microsecond)
			mclk, rclk := clock.NewFake(start), clock.NewFake(start)
			mem := backend.NewMemory(backend.WithClock(mclk))
			t.Cleanup(func() { mem.Close() })
			rb := newRedisOn(t, c, rclk)
			ml, err := ratelimit.New(mem, tc.rule)
			if err != nil {
				t.Fatal(err)
			}
			rl, err := ratelimit.New(rb, tc.rule)
			if err != nil {
				t.Fatal(err)
			}
			for i, step := range []struct {
				wait time.Duration
				n    int64
			}{{0, tc.n}, {700 * time.Millisecond, 1}, {0, 0}, {3 * time.Second, tc.n}, {90 * time.Minute, 1}, {0, 0}} {
				mclk.Advance(step.wait)
				rclk.Advance(step.wait)
				want := allowN(t, ml, "k", step.n)
				if got := allowN(t, rl, "k", step.n); got != want {
					t.Fatalf("step %d: redis %+v, memory %+v", i, got, want)
				}
				if i == 0 {
					keys, err := c.Keys(ctx, rb.Prefix()+":*").Result()
					if err != nil || len(keys) != 1 {
						t.Fatalf("keys %v, %v: want one key", keys, err)
					}
					if enc, err := c.ObjectEncoding(ctx, keys[0]).Result(); err != nil || enc != tc.encoding {
						t.Errorf("OBJECT ENCODING %s = %q, %v; want %q", keys[0], enc, err, tc.encoding)
					}
				}
			}
		})
	}
}
