package lockout_test

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/lockout"
)

// TestConcurrentFails: 64 goroutines × 4 Fails of one key at one instant.
// Exactly MaxFailures-1 of them return "not banned", with the distinct
// Remaining values MaxFailures-1 .. 1 (no failure lost or counted twice);
// every other returns the ban, which is neither late nor early.
func TestConcurrentFails(t *testing.T) {
	const workers, each = 64, 4
	p := lockout.Policy{MaxFailures: 50, Window: time.Minute, BanFor: time.Hour}
	for _, bk := range threeBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			g, err := lockout.New(bk.Make(t, clk), p)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var open []int64
			bans := 0
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for range each {
						st, err := g.Fail(ctx, "bob|198.51.100.1")
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						if st.Banned {
							bans++
							if st.RetryAfter != time.Hour || st.Remaining != 0 {
								t.Errorf("banned status %+v, want RetryAfter 1h", st)
							}
						} else {
							open = append(open, st.Remaining)
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			sort.Slice(open, func(i, j int) bool { return open[i] > open[j] })
			if len(open) != int(p.MaxFailures-1) || bans != workers*each-len(open) {
				t.Fatalf("%d calls not banned, %d banned; want %d and %d", len(open), bans, p.MaxFailures-1, workers*each-int(p.MaxFailures-1))
			}
			for i, r := range open {
				if r != p.MaxFailures-1-int64(i) {
					t.Fatalf("Remaining values %v, want %d..1 each once", open, p.MaxFailures-1)
				}
			}
			if st, err := g.Check(ctx, "bob|198.51.100.1"); err != nil || !st.Banned {
				t.Fatalf("Check after the storm: %+v, %v; want banned", st, err)
			}
		})
	}
}

// TestRealClock runs on the backends' own clocks (Redis TIME): a short ban
// is reported with RetryAfter in (0, BanFor] and is over after BanFor.
func TestRealClock(t *testing.T) {
	p := lockout.Policy{MaxFailures: 2, Window: time.Minute, BanFor: 150 * time.Millisecond}
	for _, bk := range threeBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			g, err := lockout.New(bk.Make(t, nil), p)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if _, err := g.Fail(ctx, "k"); err != nil {
					t.Fatal(err)
				}
			}
			st, err := g.Check(ctx, "k")
			if err != nil || !st.Banned || st.RetryAfter <= 0 || st.RetryAfter > p.BanFor {
				t.Fatalf("Check = %+v, %v; want banned with RetryAfter in (0, 150ms]", st, err)
			}
			time.Sleep(st.RetryAfter + 20*time.Millisecond)
			if st, err := g.Check(ctx, "k"); err != nil || st.Banned || st.Remaining != 2 {
				t.Fatalf("after the ban: %+v, %v; want open with 2 remaining", st, err)
			}
		})
	}
}

// TestRedisKeyExpiry checks the garbage collection on Redis: the failure log
// expires a Window after the last failure, the ban key with the ban, and a
// ban removes the log. Every key carries the user key's hash tag.
func TestRedisKeyExpiry(t *testing.T) {
	ctx := context.Background()
	addr := testenv.SharedRedis(t).Addr
	b := newRedisAt(t, addr, clock.NewFake(t0))
	bs := unwrap.Redis(b)
	raw := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer raw.Close()
	g, err := lockout.New(b, lockout.Policy{MaxFailures: 2, Window: 10 * time.Second, BanFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ttls := func() map[string]time.Duration {
		keys, err := raw.Keys(ctx, bs.Prefix()+":*").Result()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]time.Duration{}
		for _, k := range keys {
			if !strings.HasPrefix(k, bs.Key("carol|ip", "")) {
				t.Errorf("key %q lacks the hash tag {carol|ip}", k)
			}
			d, err := raw.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			out[k[len(k)-1:]] = d // ...:f is the log, ...:b the ban
		}
		return out
	}
	if _, err := g.Fail(ctx, "carol|ip"); err != nil {
		t.Fatal(err)
	}
	got := ttls()
	if len(got) != 1 || got["f"] <= 9*time.Second || got["f"] > 10*time.Second {
		t.Errorf("after a failure: PTTLs %v, want only the log, expiring in 10s", got)
	}
	if _, err := g.Fail(ctx, "carol|ip"); err != nil {
		t.Fatal(err)
	}
	got = ttls()
	if len(got) != 1 || got["b"] <= 59*time.Minute || got["b"] > time.Hour {
		t.Errorf("after the ban: PTTLs %v, want only the ban, expiring in 1h", got)
	}
	if err := g.Reset(ctx, "carol|ip"); err != nil {
		t.Fatal(err)
	}
	if got := ttls(); len(got) != 0 {
		t.Errorf("after Reset: keys left %v", got)
	}
}
