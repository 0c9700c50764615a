package counter_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/counter"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
)

// TestConcurrentAdds: 32 goroutines × 1000 Adds of 1 on one key, on the
// backend's own clock (Redis TIME), give exactly 32000, and the values Add
// returned are exactly 1..32000: no two Adds saw the same value, none was
// lost.
func TestConcurrentAdds(t *testing.T) {
	const workers, each = 32, 1000
	for _, bk := range threeBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			ctx := context.Background()
			c, err := counter.New(bk.Make(t, nil), "hits", counter.TTL(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			seen := make([]bool, workers*each+1)
			var mu sync.Mutex
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for range workers {
				wg.Go(func() {
					got := make([]int64, 0, each)
					for range each {
						v, err := c.Add(ctx, "hot", 1)
						if err != nil {
							errs <- err
							return
						}
						got = append(got, v)
					}
					mu.Lock()
					defer mu.Unlock()
					for _, v := range got {
						if v < 1 || v > workers*each || seen[v] {
							errs <- fmt.Errorf("Add returned %d: out of 1..%d or seen before", v, workers*each)
							return
						}
						seen[v] = true
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if got, err := c.Get(ctx, "hot"); err != nil || got != workers*each {
				t.Fatalf("Get = %d, %v; want %d", got, err, workers*each)
			}
		})
	}
}

// TestRealClock runs a short TTL on the backends' own clocks: the counter
// exists with ResetAfter in (0, TTL] and is gone once TTL has passed.
func TestRealClock(t *testing.T) {
	for _, bk := range threeBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c, err := counter.New(bk.Make(t, nil), "short", counter.TTL(150*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			if v, err := c.Add(ctx, "k", 3); err != nil || v != 3 {
				t.Fatalf("Add = %d, %v", v, err)
			}
			in, err := c.Inspect(ctx, "k")
			if err != nil || in.Value != 3 || in.ResetAfter <= 0 || in.ResetAfter > 150*time.Millisecond {
				t.Fatalf("Inspect = %+v, %v; want value 3 and ResetAfter in (0, 150ms]", in, err)
			}
			time.Sleep(200 * time.Millisecond)
			if v, err := c.Get(ctx, "k"); err != nil || v != 0 {
				t.Fatalf("after the TTL: Get = %d, %v; want 0", v, err)
			}
		})
	}
}

// TestRedisKeyExpiry checks the garbage collection on Redis: a TTL
// counter's key expires with the counter, a Window counter's at the window's
// end plus the margin, and a plain counter's never. Times come from an
// injected clock, so the expected PTTLs are exact up to the test's run time.
func TestRedisKeyExpiry(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0.Add(30 * time.Minute))
	addr := testenv.SharedRedis(t).Addr
	b := newRedisAt(t, addr, clk)
	bs := unwrap.Redis(b)
	raw := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer raw.Close()
	cases := []struct {
		name string
		opts []counter.Option
		want time.Duration // -1: no expiry
	}{
		{"ttl", []counter.Option{counter.TTL(10 * time.Second)}, 10 * time.Second},
		{"window", []counter.Option{counter.Window(time.Hour)}, 30*time.Minute + time.Minute},
		{"short-window", []counter.Option{counter.Window(time.Second)}, time.Second + time.Second},
		{"plain", nil, -1},
	}
	for _, tc := range cases {
		c, err := counter.New(b, tc.name, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Add(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
		all, err := raw.Keys(ctx, bs.Prefix()+":*"+tc.name+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		// The counter's key, and the Add's replay record, which expires
		// after the replay window.
		var keys, records []string
		for _, k := range all {
			if strings.HasPrefix(k, bs.Key("k", "r:")) {
				records = append(records, k)
			} else {
				keys = append(keys, k)
			}
		}
		if len(keys) != 1 || len(records) != 1 {
			t.Fatalf("%s: keys %q; want one counter and one replay record", tc.name, all)
		}
		if pttl, err := raw.PTTL(ctx, records[0]).Result(); err != nil || pttl > counter.DefaultReplayWindow || pttl < counter.DefaultReplayWindow-2*time.Second {
			t.Errorf("%s: replay record PTTL %v (%v), want about %v", tc.name, pttl, err, counter.DefaultReplayWindow)
		}
		if !strings.HasPrefix(keys[0], bs.Key("k", "")) {
			t.Errorf("%s: key %q does not carry the hash tag {k}", tc.name, keys[0])
		}
		pttl, err := raw.PTTL(ctx, keys[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		if tc.want < 0 {
			if pttl >= 0 {
				t.Errorf("%s: PTTL %v, want none", tc.name, pttl)
			}
			continue
		}
		if pttl > tc.want || pttl < tc.want-2*time.Second {
			t.Errorf("%s: PTTL %v, want about %v", tc.name, pttl, tc.want)
		}
	}
}
