package ratelimit_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

func TestBadRules(t *testing.T) {
	cases := []struct {
		rule ratelimit.Rule
		want string // every fragment must appear in the error
	}{
		{ratelimit.FixedWindow{Limit: -1, Window: time.Second}, "FixedWindow.Limit must be >= 0, got -1"},
		{ratelimit.FixedWindow{Limit: 1}, "FixedWindow.Window must be > 0, got 0s"},
		{ratelimit.FixedWindow{Limit: 1, Window: -time.Second}, "FixedWindow.Window must be > 0, got -1s"},
		{ratelimit.FixedWindow{Limit: 1, Window: 1500 * time.Nanosecond}, "FixedWindow.Window must be a whole number of microseconds, got 1.5µs"},
		{ratelimit.FixedWindow{Limit: 1 << 60, Window: time.Second}, "FixedWindow.Limit must be < 2^53"},
		{ratelimit.FixedWindow{Limit: 1, Window: 87601 * time.Hour}, "FixedWindow.Window must be at most MaxPeriod (87600h), got 87601h0m0s"},
		{ratelimit.SlidingWindow{Limit: -2, Window: time.Second}, "SlidingWindow.Limit must be >= 0, got -2"},
		{ratelimit.SlidingWindow{Limit: 1, Window: 0}, "SlidingWindow.Window must be > 0, got 0s"},
		{ratelimit.SlidingWindow{Limit: 1, Window: time.Second, Buckets: -1}, "SlidingWindow.Buckets must be between 1 and 1000 (0 for 10), got -1"},
		{ratelimit.SlidingWindow{Limit: 1, Window: time.Second, Buckets: 1001}, "SlidingWindow.Buckets must be between 1 and 1000 (0 for 10), got 1001"},
		{ratelimit.SlidingWindow{Limit: 1, Window: time.Second, Buckets: 7}, "SlidingWindow.Window must be a whole multiple of Buckets (7) microseconds, got 1s"},
		{ratelimit.SlidingLog{Limit: -1, Window: time.Second}, "SlidingLog.Limit must be between 0 and 100000, got -1"},
		{ratelimit.SlidingLog{Limit: 100001, Window: time.Second}, "SlidingLog.Limit must be between 0 and 100000, got 100001"},
		{ratelimit.SlidingLog{Limit: 1}, "SlidingLog.Window must be > 0, got 0s"},
		{ratelimit.TokenBucket{Capacity: -1, Refill: 1, Every: time.Second}, "TokenBucket.Capacity must be >= 0, got -1"},
		{ratelimit.TokenBucket{Capacity: 1, Refill: 0, Every: time.Second}, "TokenBucket.Refill must be > 0, got 0"},
		{ratelimit.TokenBucket{Capacity: 1, Refill: 1}, "TokenBucket.Every must be > 0, got 0s"},
		{ratelimit.TokenBucket{Capacity: 1 << 40, Refill: 1, Every: time.Hour}, "TokenBucket: Capacity (1099511627776) × Every (3600000000µs)"},
		{ratelimit.LeakyBucket{Rate: 0, Per: time.Second}, "LeakyBucket.Rate must be > 0, got 0"},
		{ratelimit.LeakyBucket{Rate: 1}, "LeakyBucket.Per must be > 0, got 0s"},
		{ratelimit.LeakyBucket{Rate: 1, Per: time.Second, Burst: -1}, "LeakyBucket.Burst must be >= 0, got -1"},
		{ratelimit.LeakyBucket{Rate: 1, Per: time.Second, Delay: -2}, "LeakyBucket.Delay must be >= 0 or NoDelay, got -2"},
		{ratelimit.GCRA{Rate: -1, Per: time.Second, Burst: 1}, "GCRA.Rate must be > 0, got -1"},
		{ratelimit.GCRA{Rate: 1, Burst: 1}, "GCRA.Per must be > 0, got 0s"},
		{ratelimit.GCRA{Rate: 1, Per: time.Second, Burst: -5}, "GCRA.Burst must be >= 0, got -5"},
		{ratelimit.Named("", ratelimit.GCRA{Rate: 1, Per: time.Second, Burst: 1}), "Named: name is empty"},
		{ratelimit.Named("x", nil), `Named("x"): rule is nil`},
		{ratelimit.Named("x", ratelimit.GCRA{Rate: 1, Burst: 1}), "GCRA.Per must be > 0"},
	}
	m := backend.NewMemory()
	defer m.Close()
	for _, c := range cases {
		_, err := ratelimit.New(m, ratelimit.FixedWindow{Limit: 1, Window: time.Second}, c.rule)
		if err == nil {
			t.Errorf("%+v: New accepted it", c.rule)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "rules[1]") {
			t.Errorf("%+v:\n got %q\nwant it to contain %q and rules[1]", c.rule, err, c.want)
		}
	}
	if _, err := ratelimit.New(m); !errors.Is(err, ratelimit.ErrNoRules) {
		t.Errorf("New without rules: %v", err)
	}
	many := make([]ratelimit.Rule, ratelimit.MaxRules+1)
	for i := range many {
		many[i] = ratelimit.FixedWindow{Limit: int64(i), Window: time.Second}
	}
	if _, err := ratelimit.New(m, many...); err == nil || !strings.Contains(err.Error(), "MaxRules") {
		t.Errorf("New with %d rules: %v", len(many), err)
	}
	if _, err := ratelimit.New(m, many[:ratelimit.MaxRules]...); err != nil {
		t.Errorf("New with MaxRules rules: %v", err)
	}
	if _, err := ratelimit.New(nil, ratelimit.GCRA{Rate: 1, Per: time.Second, Burst: 1}); err == nil {
		t.Error("New with a nil backend succeeded")
	}
	if _, err := ratelimit.New(m, ratelimit.FixedWindow{Limit: 1, Window: time.Second}, nil); err == nil || !strings.Contains(err.Error(), "rules[1] is nil") {
		t.Errorf("nil rule: %v", err)
	}
	dup := ratelimit.TokenBucket{Capacity: 1, Refill: 1, Every: time.Second}
	if _, err := ratelimit.New(m, dup, dup); err == nil || !strings.Contains(err.Error(), "rules[1] repeats rules[0]") {
		t.Errorf("duplicate rule: %v", err)
	}
	// Two different rules under one name: Result.RuleName would be ambiguous.
	_, err := ratelimit.New(m,
		ratelimit.Named("api", ratelimit.FixedWindow{Limit: 10, Window: time.Second}),
		ratelimit.GCRA{Rate: 1, Per: time.Second, Burst: 1},
		ratelimit.Named("api", ratelimit.FixedWindow{Limit: 100, Window: time.Minute}))
	if err == nil || !strings.Contains(err.Error(), `rules[0] and rules[2] are both Named "api"`) {
		t.Errorf("two rules Named alike: %v; want an error naming both", err)
	}
	for _, c := range []ratelimit.Concurrency{{Limit: -1, Lease: time.Second}, {Limit: 1}} {
		if _, err := ratelimit.NewConcurrency(m, c); err == nil {
			t.Errorf("NewConcurrency(%+v) succeeded", c)
		}
	}
}

func TestBadCalls(t *testing.T) {
	for _, bk := range allBackends()[:2] {
		t.Run(bk.name, func(t *testing.T) {
			lim, err := ratelimit.New(bk.make(t, nil), ratelimit.GCRA{Rate: 1, Per: time.Second, Burst: 1})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := lim.Allow(ctx, ""); !errors.Is(err, backend.ErrEmptyKey) {
				t.Errorf("empty key: %v", err)
			}
			if _, err := lim.Allow(ctx, strings.Repeat("k", backend.MaxKeyLen+1)); err != nil { // limited by its digest (TestLongKeys)
				t.Errorf("long key: %v", err)
			}
			if _, err := lim.Allow(ctx, strings.Repeat("k", backend.MaxKeyLen)); err != nil {
				t.Errorf("key of MaxKeyLen: %v", err)
			}
			if _, err := lim.AllowN(ctx, "k", -1); !errors.Is(err, ratelimit.ErrNegativeN) {
				t.Errorf("n < 0: %v", err)
			}
			if err := lim.Reset(ctx, ""); !errors.Is(err, backend.ErrEmptyKey) {
				t.Errorf("Reset empty key: %v", err)
			}
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := lim.Allow(cancelled, "k"); !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled ctx: %v", err)
			}
			if err := lim.Wait(cancelled, "k"); !errors.Is(err, context.Canceled) {
				t.Errorf("Wait, cancelled ctx: %v", err)
			}
			cl, _ := ratelimit.NewConcurrency(bk.make(t, nil), ratelimit.Concurrency{Limit: 1, Lease: time.Second})
			if rel, _, err := cl.Acquire(ctx, ""); !errors.Is(err, backend.ErrEmptyKey) || rel == nil {
				t.Errorf("Acquire empty key: %v (release must still be callable)", err)
			}
		})
	}
}

// TestBracesInKeys checks that keys with braces stay on one Cluster slot.
func TestBracesInKeys(t *testing.T) {
	b := allBackends()[3].make(t, nil)
	lim, err := ratelimit.New(b, ratelimit.FixedWindow{Limit: 1, Window: time.Hour}, ratelimit.GCRA{Rate: 1, Per: time.Hour, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"}x", "{", "{}", "a}b{c", "%7D", "}"} {
		if _, err := lim.Allow(context.Background(), key); err != nil {
			t.Errorf("key %q: %v", key, err)
		}
	}
	// "}" and "%7D" must not share state despite the escaping.
	r, _ := lim.AllowN(context.Background(), "}", 0)
	if r.Remaining != 0 {
		t.Errorf("key } lost its state: %+v", r)
	}
}

func TestUnreachableRedisRespectsDeadline(t *testing.T) {
	// A paused server accepts connections but never answers.
	srv := testenv.NewRedis(t)
	for _, ctxTimeout := range []bool{false, true} {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: ctxTimeout})
		defer c.Close()
		lim, err := ratelimit.New(backendtest.NewRedis(t, c), ratelimit.GCRA{Rate: 1, Per: time.Second, Burst: 5})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lim.Allow(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*ms)
		start := time.Now()
		_, err = lim.Allow(ctx, "k")
		took := time.Since(start)
		cancel()
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
		if err == nil {
			t.Fatal("a paused Redis answered")
		}
		if took > time.Second {
			t.Errorf("ContextTimeoutEnabled=%v: took %v with a 200ms deadline", ctxTimeout, took)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("ContextTimeoutEnabled=%v: error does not match context.DeadlineExceeded: %v", ctxTimeout, err)
		}
	}

	// Nothing listens on a port that was just closed.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	dead := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer dead.Close()
	lim2, _ := ratelimit.New(backendtest.NewRedis(t, dead), ratelimit.GCRA{Rate: 1, Per: time.Second, Burst: 5})
	ctx2, cancel2 := context.WithTimeout(context.Background(), 200*ms)
	defer cancel2()
	start := time.Now()
	if _, err := lim2.Allow(ctx2, "k"); err == nil || !strings.Contains(err.Error(), "ratelimit:") {
		t.Errorf("closed port: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("closed port took %v", took)
	}
}
