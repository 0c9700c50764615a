package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// chargeStep is one call of a charge table: move the fake clock by advance,
// then Charge(n) when charge is set, else AllowN(n), and demand want.
type chargeStep struct {
	advance time.Duration
	charge  bool
	n       int64
	want    ratelimit.Result
}

func debt(r ratelimit.Result, d int64) ratelimit.Result {
	r.Debt = d
	return r
}

func rule(r ratelimit.Result, i int) ratelimit.Result {
	r.Rule = i
	return r
}

// chargeTables hold hand-computed charges and what follows them, per
// algorithm; every backend must reproduce them.
var chargeTables = []struct {
	name  string
	rules []ratelimit.Rule
	steps []chargeStep
}{
	// 10 tokens a second, 10 at most: a charge of 30 on a full bucket
	// leaves a debt of 20, paid back by 2 s of refill; the next unit is
	// admitted 100 ms after that.
	{"token bucket", []ratelimit.Rule{ratelimit.TokenBucket{Capacity: 10, Refill: 10, Every: time.Second}}, []chargeStep{
		{0, true, 4, allowed(10, 6, 400*ms)},
		{0, true, 30, debt(denied(10, 0, 2400*ms, 3400*ms), 24)},
		{400 * ms, false, 0, debt(denied(10, 0, 2*time.Second, 3*time.Second), 20)},
		{0, false, 1, debt(denied(10, 0, 2100*ms, 3*time.Second), 20)},
		{time.Second, false, 0, debt(denied(10, 0, time.Second, 2*time.Second), 10)},
		{950 * ms, false, 0, debt(denied(10, 0, 50*ms, 1050*ms), 1)},
		{50 * ms, false, 0, allowed(10, 0, time.Second)},
		{0, false, 1, denied(10, 0, 100*ms, time.Second)},
		{100 * ms, false, 1, allowed(10, 0, time.Second)},
		{time.Second, true, 0, allowed(10, 10, 0)}, // a charge of 0 peeks
	}},
	// GCRA 10/s, burst 10 drains as the bucket above.
	{"gcra", []ratelimit.Rule{ratelimit.GCRA{Rate: 10, Per: time.Second, Burst: 10}}, []chargeStep{
		{0, true, 25, debt(denied(10, 0, 1500*ms, 2500*ms), 15)},
		{1500 * ms, false, 0, allowed(10, 0, time.Second)},
		{0, false, 1, denied(10, 0, 100*ms, time.Second)},
	}},
	// A LeakyBucket of 2/s with a burst of 3 (4 in the bucket): a charge of
	// 10 leaves 6 past it, 3 s of leaking.
	{"leaky bucket", []ratelimit.Rule{ratelimit.LeakyBucket{Rate: 2, Per: time.Second, Burst: 3, Delay: ratelimit.NoDelay}}, []chargeStep{
		{0, true, 10, debt(denied(4, 0, 3*time.Second, 5*time.Second), 6)},
		{3 * time.Second, false, 0, allowed(4, 0, 2*time.Second)},
		{500 * ms, false, 1, allowed(4, 0, 2*time.Second)},
	}},
	// A fixed window counts past its limit; the debt ends with the window.
	{"fixed window", []ratelimit.Rule{ratelimit.FixedWindow{Limit: 10, Window: 10 * time.Second}}, []chargeStep{
		{0, true, 4, allowed(10, 6, 10*time.Second)},
		{time.Second, true, 25, debt(denied(10, 0, 9*time.Second, 9*time.Second), 19)},
		{0, false, 0, debt(denied(10, 0, 9*time.Second, 9*time.Second), 19)},
		{0, true, 1, debt(denied(10, 0, 9*time.Second, 9*time.Second), 20)},
		{9 * time.Second, false, 0, allowed(10, 10, 0)},
		{0, false, 10, allowed(10, 0, 10*time.Second)},
	}},
	// A sliding window keeps the units until their bucket leaves it.
	{"sliding window", []ratelimit.Rule{ratelimit.SlidingWindow{Limit: 10, Window: time.Minute, Buckets: 6}}, []chargeStep{
		{0, true, 25, debt(denied(10, 0, 70*time.Second, 70*time.Second), 15)},
		{30 * time.Second, false, 0, debt(denied(10, 0, 40*time.Second, 40*time.Second), 15)},
		{40 * time.Second, false, 0, allowed(10, 10, 0)},
	}},
	// A sliding log keeps an entry per unit: the debt of 5 lasts a window.
	// One call appends at most 2 × 10 + 1 entries: a charge of 100 leaves
	// a debt of 11 of them, and the key is limited exactly as long.
	{"sliding log", []ratelimit.Rule{ratelimit.SlidingLog{Limit: 10, Window: time.Minute}}, []chargeStep{
		{0, true, 15, debt(denied(10, 0, time.Minute, time.Minute), 5)},
		{59 * time.Second, false, 0, debt(denied(10, 0, time.Second, time.Second), 5)},
		{time.Second, false, 0, allowed(10, 10, 0)},
		{0, true, 100, debt(denied(10, 0, time.Minute, time.Minute), 11)},
		{time.Minute, false, 0, allowed(10, 10, 0)},
	}},
	// Two rules: a charge is recorded on both, the debt reported is the
	// binding rule's (the longest RetryAfter).
	{"multi-rule", []ratelimit.Rule{
		ratelimit.FixedWindow{Limit: 100, Window: 100 * time.Second},
		ratelimit.TokenBucket{Capacity: 10, Refill: 10, Every: time.Second},
	}, []chargeStep{
		{0, true, 30, rule(debt(denied(10, 0, 2*time.Second, 3*time.Second), 20), 1)},
		{2 * time.Second, false, 0, rule(allowed(10, 0, time.Second), 1)},
		{time.Second, false, 0, rule(allowed(10, 10, 0), 1)},
		{0, true, 40, rule(debt(denied(10, 0, 3*time.Second, 4*time.Second), 30), 1)},
		{3500 * ms, true, 5, rule(allowed(10, 0, time.Second), 1)},
		{0, true, 30, debt(denied(100, 0, 93500*ms, 93500*ms), 5)},
		{93500 * ms, false, 0, rule(allowed(10, 10, 0), 1)},
	}},
}

func TestChargeDebt(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			for _, tb := range chargeTables {
				clk := clock.NewFake(t0)
				lim, err := ratelimit.New(bk.make(t, clk), tb.rules...)
				if err != nil {
					t.Fatal(err)
				}
				for i, s := range tb.steps {
					clk.Advance(s.advance)
					call, res, err := "AllowN", ratelimit.Result{}, error(nil)
					if s.charge {
						call = "Charge"
						res, err = lim.Charge(context.Background(), "k", s.n)
					} else {
						res, err = lim.AllowN(context.Background(), "k", s.n)
					}
					if err != nil {
						t.Fatal(err)
					}
					if res != s.want {
						t.Errorf("%s step %d: %s(%d):\n got %+v\nwant %+v", tb.name, i, call, s.n, res, s.want)
					}
				}
			}
		})
	}
}

// TestChargeHuge charges far more than any rule holds: the usage saturates
// (TestChargeDifferential holds the backends to the same values), the key
// is in debt, and nothing overflows.
func TestChargeHuge(t *testing.T) {
	rules := []ratelimit.Rule{
		ratelimit.FixedWindow{Limit: 10, Window: time.Minute},
		ratelimit.SlidingWindow{Limit: 10, Window: time.Minute, Buckets: 6},
		ratelimit.SlidingLog{Limit: 10, Window: time.Minute},
		ratelimit.TokenBucket{Capacity: 10, Refill: 10, Every: time.Second},
		ratelimit.LeakyBucket{Rate: 10, Per: time.Second, Burst: 5},
		ratelimit.GCRA{Rate: 10, Per: time.Second, Burst: 10},
	}
	for _, bk := range allBackends()[:2] {
		t.Run(bk.name, func(t *testing.T) {
			for _, r := range rules {
				lim, err := ratelimit.New(bk.make(t, clock.NewFake(t0)), r)
				if err != nil {
					t.Fatal(err)
				}
				for range 2 {
					res, err := lim.Charge(context.Background(), "k", math.MaxInt64)
					if err != nil {
						t.Fatal(err)
					}
					if res.Allowed || res.Debt <= 0 || res.Remaining != 0 || res.RetryAfter <= 0 {
						t.Errorf("%+v: Charge(MaxInt64) = %+v, want a debt", r, res)
					}
				}
				if res, _ := lim.AllowN(context.Background(), "k", 0); res.Allowed || res.Debt <= 0 {
					t.Errorf("%+v: AllowN(0) after Charge(MaxInt64) = %+v, want denied with a debt", r, res)
				}
			}
		})
	}
}

func TestChargeBadCalls(t *testing.T) {
	for _, bk := range allBackends()[:2] {
		t.Run(bk.name, func(t *testing.T) {
			lim, err := ratelimit.New(bk.make(t, nil), ratelimit.GCRA{Rate: 1, Per: time.Second, Burst: 1})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := lim.Charge(ctx, "", 1); !errors.Is(err, backend.ErrEmptyKey) {
				t.Errorf("empty key: %v", err)
			}
			if _, err := lim.Charge(ctx, "k", -1); !errors.Is(err, ratelimit.ErrNegativeN) {
				t.Errorf("n < 0: %v", err)
			}
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := lim.Charge(cancelled, "k", 1); !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled ctx: %v", err)
			}
			if res, err := lim.Charge(ctx, "k", 0); err != nil || !res.Allowed || res.Remaining != 1 {
				t.Errorf("Charge(0) on a fresh key = %+v, %v; want a peek of a full budget", res, err)
			}
		})
	}
}

// TestChargeDifferential runs random scenarios of AllowN and Charge —
// random rule sets of every algorithm, arrivals, costs past every limit,
// keys, peeks and resets — on memory and on each Redis kind, and demands
// identical Results at every call, Debt included.
func TestChargeDifferential(t *testing.T) {
	scenarios := 40
	if testing.Short() {
		scenarios = 10
	}
	bks := allBackends()
	for _, other := range bks[1:] {
		t.Run("memory vs "+other.name, func(t *testing.T) {
			t.Parallel()
			var debts, peeks int // calls reporting a debt, and peeks among them
			for sc := range scenarios {
				rng := rand.New(rand.NewPCG(uint64(sc), 28))
				var rules []ratelimit.Rule
				for range 1 + rng.IntN(3) {
					rules = append(rules, randomRule(rng))
				}
				clk := clock.NewFake(t0.Add(time.Duration(rng.Int64N(int64(time.Hour)))))
				ref, err := ratelimit.New(bks[0].make(t, clk), rules...)
				if err != nil {
					continue // two equal random rules
				}
				lim, err := ratelimit.New(other.make(t, clk), rules...)
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				last := time.Now()
				for i := range 150 {
					// As in TestDifferential: the fake clock never falls
					// behind the real time between Redis calls.
					step := time.Duration(rng.Int64N(int64(120 * ms)))
					if spent := time.Since(last) + 10*ms; spent > step {
						step = spent
					}
					clk.Advance(step)
					key := fmt.Sprint("k", rng.IntN(3))
					if rng.IntN(40) == 0 {
						if err := ref.Reset(ctx, key); err != nil {
							t.Fatal(err)
						}
						if err := lim.Reset(ctx, key); err != nil {
							t.Fatal(err)
						}
						continue
					}
					charge := rng.IntN(3) == 0
					n := rng.Int64N(4)
					switch {
					case charge && rng.IntN(50) == 0:
						n = math.MaxInt64 >> rng.IntN(63)
					case charge:
						n = rng.Int64N(12)
					}
					call := ref.AllowN
					other := lim.AllowN
					if charge {
						call, other = ref.Charge, lim.Charge
					}
					last = time.Now()
					got, err := other(ctx, key, n)
					if err != nil {
						t.Fatal(err)
					}
					want, err := call(ctx, key, n)
					if err != nil {
						t.Fatal(err)
					}
					if got != want {
						t.Fatalf("scenario %d call %d, rules %+v, key %s, charge %v n=%d:\nmemory %+v\nredis  %+v", sc, i, rules, key, charge, n, want, got)
					}
					if want.Debt > 0 {
						debts++
						if !charge && n == 0 {
							peeks++
						}
					}
				}
			}
			if debts == 0 || peeks == 0 {
				t.Errorf("%d calls reported a debt, %d of them peeks: the scenarios miss what they test", debts, peeks)
			}
			t.Logf("%d calls reported a debt, %d of them peeks", debts, peeks)
		})
	}
}

// TestChargeLongLog charges a SlidingLog far past a large limit: the log
// takes its 2 × Limit + 1 entries (more than one ZADD's arguments can
// carry on Redis), and every backend reports the same debt.
func TestChargeLongLog(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			lim, err := ratelimit.New(bk.make(t, clk), ratelimit.SlidingLog{Limit: 6000, Window: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if r, err := lim.AllowN(ctx, "k", 5000); err != nil || !r.Allowed || r.Remaining != 1000 {
				t.Fatalf("AllowN(5000) = %+v, %v; want allowed, 1000 left", r, err)
			}
			r, err := lim.Charge(ctx, "k", 1_000_000)
			if err != nil {
				t.Fatal(err)
			}
			want := debt(denied(6000, 0, time.Minute, time.Minute), 5000+12001-6000)
			if r != want {
				t.Errorf("Charge(1e6) = %+v, want %+v", r, want)
			}
		})
	}
}

// TestChargeDebtForm: on Redis a bucket in debt is kept in codec.lua's debt
// form, "t:-L" at the charge's time exactly, on TIME and on an injected
// clock; once the debt is paid back an admission writes an ordinary form
// again.
func TestChargeDebtForm(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: testenv.SharedRedis(t).Addr})
	t.Cleanup(func() { c.Close() })
	for _, fake := range []bool{false, true} {
		var clk *clock.Fake
		var b *backend.Redis
		if fake {
			clk = clock.NewFake(t0.Add(123 * us))
			b = newRedisOn(t, c, clk)
		} else {
			b = newRedisOn(t, c, nil)
		}
		lim, err := ratelimit.New(b, ratelimit.TokenBucket{Capacity: 10, Refill: 10, Every: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		value := func() string {
			t.Helper()
			keys, err := c.Keys(ctx, unwrap.Redis(b).Prefix()+":*").Result()
			if err != nil || len(keys) != 1 {
				t.Fatalf("keys %v, %v: want one key", keys, err)
			}
			v, err := c.Get(ctx, keys[0]).Result()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		if r, err := lim.Charge(ctx, "k", 30); err != nil || r.Debt != 20 {
			t.Fatalf("fake clock %v: Charge(30) = %+v, %v; want a debt of 20", fake, r, err)
		}
		v := value()
		at, l, ok := strings.Cut(v, ":-")
		if !ok || strings.Contains(l, ":") || strings.HasPrefix(l, "-") {
			t.Fatalf("fake clock %v: state %q, want the debt form t:-L", fake, v)
		}
		if fake && at != strconv.FormatInt(clk.Now().UnixMicro(), 10) {
			t.Errorf("state %q, want the time %d", v, clk.Now().UnixMicro())
		}
		if !fake {
			continue // the rest needs a clock to move
		}
		clk.Advance(2500 * ms)
		if r := allowN(t, lim, "k", 1); !r.Allowed || r.Remaining != 4 {
			t.Fatalf("after the debt: %+v, want allowed with 4 left", r)
		}
		if v := value(); strings.Contains(v, ":-") {
			t.Errorf("state %q after an admission out of debt, want an ordinary form", v)
		}
	}
}
