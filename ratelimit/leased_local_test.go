package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// TestLeasedLocal checks that Local decides exactly as AllowN does where
// AllowN needs no store call, and declines where it would: two Leased of
// the same rules on stores of their own make the same calls, one through
// AllowN only, the other through Local first (AllowN when Local declines).
// Every result must agree, Local must decide every unit a lease holds and
// the in-process denial, and Held must count what the lease holds.
func TestLeasedLocal(t *testing.T) {
	ctx := context.Background()
	for _, rc := range leasableRules() {
		for _, bk := range []string{"memory", "redis"} {
			t.Run(rc.name+"/"+bk, func(t *testing.T) {
				clk := clock.NewFake(t0)
				opts := []ratelimit.LeaseOption{ratelimit.LeaseSize(10, 10), ratelimit.LeaseFraction(1)}
				ref := processes(t, bk, clk, 1, []ratelimit.Rule{rc.rule}, opts...)[0]
				l := processes(t, bk, clk, 1, []ratelimit.Rule{rc.rule}, opts...)[0]
				if _, ok := l.Local("k", 1); ok {
					t.Fatal("Local decided a key without a lease")
				}
				if h := l.Held("k"); h != 0 {
					t.Fatalf("Held of a key never decided = %d, want 0", h)
				}
				local, denials := 0, 0
				for i := range 400 {
					want, err := ref.AllowN(ctx, "k", 1)
					if err != nil {
						t.Fatal(err)
					}
					got, ok := l.Local("k", 1)
					if ok {
						local++
					} else if got, err = l.AllowN(ctx, "k", 1); err != nil {
						t.Fatal(err)
					}
					if got.Allowed != want.Allowed || got.Remaining != want.Remaining {
						t.Fatalf("call %d: Local-first = %+v, AllowN = %+v", i, got, want)
					}
					if !got.Allowed {
						denials++
						if ok && got.RetryAfter <= 0 {
							t.Fatalf("call %d: an in-process denial without RetryAfter: %+v", i, got)
						}
					}
					if i == 0 {
						if h := l.Held("k"); h != 9 {
							t.Fatalf("after the first lease of 10 units, Held = %d, want 9", h)
						}
					}
				}
				if denials == 0 {
					t.Fatal("the rules never denied: the test did not reach the in-process denial")
				}
				// Of every lease of 10 units, 9 are decided by Local; after the
				// first denial, the denials until the RetryAfter too.
				if local < 9*(400-denials)/10 {
					t.Errorf("Local decided %d of %d calls (%d denied); want at least 9 of every 10 admitted", local, 400, denials)
				}
				if _, ok := l.Local("k", 0); ok {
					t.Error("Local decided n = 0")
				}
				if _, ok := l.Local("", 1); ok {
					t.Error("Local decided the empty key")
				}
			})
		}
	}
}

// TestLeasedLocalThroughStall pauses Redis while a lease holds units:
// Local goes on deciding them at once, and declines (without waiting for
// the store) when they are spent.
func TestLeasedLocalThroughStall(t *testing.T) {
	if testing.Short() {
		testenv.NotInstalled(t, "a private Redis to pause (skipped under -short)")
	}
	ctx := context.Background()
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { c.Close() })
	b, err := backend.NewRedis(c)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratelimit.New(b, ratelimit.FixedWindow{Limit: 1000, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	l, err := ratelimit.NewLeased(lim, ratelimit.LeaseSize(20, 20), ratelimit.LeaseFraction(1), ratelimit.LeaseLifetime(time.Hour), ratelimit.LeaseFlushEvery(-1))
	if err != nil {
		t.Fatal(err)
	}
	first, err := l.Allow(ctx, "hot")
	if err != nil || !first.Allowed {
		t.Fatalf("first Allow = %+v, %v", first, err)
	}
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	defer r.Resume()
	for i := range 19 {
		res, ok := l.Local("hot", 1)
		if !ok || !res.Allowed {
			t.Fatalf("unit %d of the lease, Redis paused: Local = %+v, %v", i+2, res, ok)
		}
		if want := first.Remaining - int64(i) - 1; res.Remaining != want {
			t.Fatalf("unit %d: Remaining %d, want %d", i+2, res.Remaining, want)
		}
	}
	if res, ok := l.Local("hot", 1); ok {
		t.Fatalf("Local decided past the lease: %+v", res)
	}
	if h := l.Held("hot"); h != 0 {
		t.Fatalf("Held after the lease was spent = %d", h)
	}
}
