package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// eachRules are Limiters of several rules in which every algorithm is once
// the tight rule, beside a looser one: drain and fixed-window rules only
// (Redis's generated fast path), and with a SlidingWindow or SlidingLog
// (limits.lua). Periods are a minute long so that, on Redis, no key's TTL
// (real time) ends while the fake clock stands still.
func eachRules() [][]ratelimit.Rule {
	m := time.Minute
	loose := ratelimit.Named("loose", ratelimit.FixedWindow{Limit: 10, Window: 10 * m})
	return [][]ratelimit.Rule{
		{ratelimit.FixedWindow{Limit: 3, Window: m}, ratelimit.Named("loose", ratelimit.GCRA{Rate: 10, Per: 10 * m, Burst: 9})},
		{ratelimit.SlidingWindow{Limit: 3, Window: m, Buckets: 4}, loose},
		{ratelimit.SlidingLog{Limit: 3, Window: m}, loose},
		{ratelimit.TokenBucket{Capacity: 3, Refill: 1, Every: 20 * time.Second}, loose},
		{ratelimit.LeakyBucket{Rate: 3, Per: m, Burst: 2, Delay: 1}, loose},
		{loose, ratelimit.GCRA{Rate: 3, Per: m, Burst: 2}}, // the tight rule second
		{ // three rules whose fields are not in rule order
			ratelimit.Named("b", ratelimit.GCRA{Rate: 3, Per: m, Burst: 2}),
			ratelimit.Named("c", ratelimit.FixedWindow{Limit: 4, Window: m}),
			ratelimit.Named("a", ratelimit.FixedWindow{Limit: 10, Window: 10 * m}),
		},
	}
}

// TestAllowNEachDifferential checks each rule's Result from AllowNEach
// against a Limiter of that rule alone, fed the units the several-rule
// Limiter consumed: after an admitted call, each[i] is what the lone rule
// reports for the same n; after a denied one (nothing consumed), a rule
// that denies reports the lone rule's denial, and a rule that admits
// reports the lone rule's peek, with n within its Remaining. The returned
// Result is AllowN's, on a second key fed the same calls.
func TestAllowNEachDifferential(t *testing.T) {
	calls := 120
	if testing.Short() {
		calls = 40
	}
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			for si, rules := range eachRules() {
				rng := rand.New(rand.NewPCG(7, uint64(si)))
				clk := clock.NewFake(t0)
				b := bk.make(t, clk)
				multi, err := ratelimit.New(b, rules...)
				if err != nil {
					t.Fatal(err)
				}
				alone := make([]*ratelimit.Limiter, len(rules))
				for i, r := range rules {
					if alone[i], err = ratelimit.New(b, r); err != nil {
						t.Fatal(err)
					}
				}
				ctx := context.Background()
				each := make([]ratelimit.Result, len(rules))
				var admitted, denied, partly int
				for c := range calls {
					clk.Advance(time.Duration(rng.Int64N(int64(25 * time.Second))))
					n := rng.Int64N(3)
					if rng.IntN(15) == 0 {
						n = 5 // never admissible by the tight rules
					}
					res, err := multi.AllowNEach(ctx, "each", n, each)
					if err != nil {
						t.Fatal(err)
					}
					if want := allowN(t, multi, "plain", n); res != want {
						t.Fatalf("set %d call %d (n=%d): AllowNEach returned %+v, AllowN %+v", si, c, n, res, want)
					}
					bind := each[res.Rule]
					if res.Allowed {
						bind.Delay = res.Delay
					}
					if res != bind {
						t.Fatalf("set %d call %d (n=%d): Result %+v is not each[%d] = %+v", si, c, n, res, res.Rule, each[res.Rule])
					}
					if res.Allowed {
						admitted++
					} else {
						denied++
					}
					for i, l := range alone {
						var want ratelimit.Result
						switch {
						case res.Allowed || !each[i].Allowed:
							want = allowN(t, l, "each", n) // admitted: consumed as in multi; denied: nothing consumed
						default:
							want = allowN(t, l, "each", 0)
							partly++
							if n > want.Remaining {
								t.Errorf("set %d call %d (n=%d): rule %d reports it admits, but %d remain", si, c, n, i, want.Remaining)
							}
						}
						want.Rule, want.RuleName = i, multi.RuleName(i)
						if each[i] != want {
							t.Fatalf("set %d call %d (n=%d, allowed %v): each[%d] = %+v, the rule alone %+v", si, c, n, res.Allowed, i, each[i], want)
						}
						if res.Allowed != each[i].Allowed && res.Allowed {
							t.Fatalf("set %d call %d: admitted, but each[%d] denies", si, c, i)
						}
					}
				}
				if admitted == 0 || denied == 0 || partly == 0 {
					t.Errorf("set %d: %d admitted, %d denied, %d rule answers of a denied call admitted: the traffic tests too little", si, admitted, denied, partly)
				}
			}
		})
	}
}

func TestAllowNEachErrors(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	lim, err := ratelimit.New(m, ratelimit.FixedWindow{Limit: 1, Window: time.Second}, ratelimit.FixedWindow{Limit: 5, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := lim.AllowNEach(ctx, "k", 1, make([]ratelimit.Result, 1)); err == nil {
		t.Error("AllowNEach with len(each) 1 < Rules() 2: no error")
	}
	if r, _ := lim.AllowN(ctx, "k", 0); r.Remaining != 1 {
		t.Errorf("AllowNEach that failed consumed: Remaining %d, want 1", r.Remaining)
	}
	each := make([]ratelimit.Result, 3) // longer is fine; each[2] is left alone
	each[2].RuleName = "untouched"
	if _, err := lim.AllowNEach(ctx, "", 1, each); !errors.Is(err, backend.ErrEmptyKey) {
		t.Errorf("empty key: err %v, want ErrEmptyKey", err)
	}
	if _, err := lim.AllowNEach(ctx, "k", -1, each); !errors.Is(err, ratelimit.ErrNegativeN) {
		t.Errorf("n = -1: err %v, want ErrNegativeN", err)
	}
	if r, err := lim.AllowNEach(ctx, "k", 1, each); err != nil || !r.Allowed || each[2].RuleName != "untouched" {
		t.Errorf("AllowNEach = %+v, %v; each[2] = %+v", r, err, each[2])
	}
	if got := fmt.Sprint(each[0].Remaining, each[1].Remaining); got != "0 4" {
		t.Errorf("Remaining per rule %s, want 0 4", got)
	}
}
