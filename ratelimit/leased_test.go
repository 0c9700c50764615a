package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// leasableRules lists a rule of every algorithm that leases, with limits
// small enough that the processes of the tests below run out of them. Time
// runs on a fake clock in seconds, not milliseconds, because Redis expires
// keys by its own clock: a TTL of a few fake milliseconds could pass in real
// time between two calls and drop state the fake clock still needs.
func leasableRules() []struct {
	name string
	rule ratelimit.Rule
} {
	return []struct {
		name string
		rule ratelimit.Rule
	}{
		{"fixed_window", ratelimit.FixedWindow{Limit: 200, Window: 100 * time.Second}},
		{"sliding_window", ratelimit.SlidingWindow{Limit: 200, Window: 100 * time.Second, Buckets: 4}},
		{"token_bucket", ratelimit.TokenBucket{Capacity: 200, Refill: 2, Every: time.Second}},
		{"gcra", ratelimit.GCRA{Rate: 2, Per: time.Second, Burst: 200}},
		{"leaky_bucket_nodelay", ratelimit.LeakyBucket{Rate: 2, Per: time.Second, Burst: 199, Delay: ratelimit.NoDelay}},
		{"fixed_and_gcra", ratelimit.Named("pair", ratelimit.FixedWindow{Limit: 150, Window: 100 * time.Second})},
	}
}

// processes makes p Leased of rules on one store, each as a separate process
// would: on Redis each with its own client (one server, one key prefix), on
// Memory sharing the backend (a process's Memory is its own store, so
// processes can share one only in a test).
func processes(t *testing.T, bk string, clk clock.Clock, p int, rules []ratelimit.Rule, opts ...ratelimit.LeaseOption) []*ratelimit.Leased {
	t.Helper()
	var mem *backend.Memory
	prefix := uniquePrefix(t)
	ls := make([]*ratelimit.Leased, p)
	for i := range ls {
		var b backend.Backend
		switch bk {
		case "memory":
			if mem == nil {
				mem = backend.NewMemory(backend.WithClock(clk))
				t.Cleanup(func() { mem.Close() })
			}
			b = mem
		case "redis":
			c := redis.NewClient(&redis.Options{Addr: testenv.SharedRedis(t).Addr})
			t.Cleanup(func() { c.Close() })
			o := []backend.Option{backend.WithPrefix(prefix)}
			if clk != nil {
				o = append(o, backend.WithClock(clk))
			}
			rb, err := backend.NewRedis(c, o...)
			if err != nil {
				t.Fatal(err)
			}
			b = rb
		}
		lim, err := ratelimit.New(b, rules...)
		if err != nil {
			t.Fatal(err)
		}
		// No background flush: the tests run on fake clocks and flush
		// where they mean to (unless opts say otherwise).
		o := append([]ratelimit.LeaseOption{ratelimit.LeaseFlushEvery(-1)}, opts...)
		if ls[i], err = ratelimit.NewLeased(lim, o...); err != nil {
			t.Fatal(err)
		}
	}
	return ls
}

// TestLeasedBound runs P processes that lease one hot key on a fake clock
// in random bursts and pauses, and checks every admission against an exact
// reference: a plain Limiter of the same rules on its own store, which is
// told of every admitted unit at the time it was admitted. The reference
// must admit each (leases never admit more than the rules allow, over any
// span), and at each denial the reference may have no more than the
// documented bound left beyond the n asked for (the under-admission bound:
// P·k units, plus for a drain rule its refill of LeaseTarget).
func TestLeasedBound(t *testing.T) {
	const P, k = 4, 10
	rules := leasableRules()
	rules[len(rules)-1].rule = nil // built below: two rules
	for _, bk := range []string{"memory", "redis"} {
		t.Run(bk, func(t *testing.T) {
			t.Parallel()
			for _, rc := range rules {
				rs := []ratelimit.Rule{rc.rule}
				if rc.rule == nil {
					rs = []ratelimit.Rule{
						ratelimit.FixedWindow{Limit: 150, Window: 100 * time.Second},
						ratelimit.GCRA{Rate: 1, Per: time.Second, Burst: 100},
					}
				}
				t.Run(rc.name, func(t *testing.T) {
					bound := int64(P) * k
					switch r := rc.rule.(type) {
					case nil:
						// A window's end ends every lease, and the units of
						// one whose give-back the GCRA refused stay in its
						// level until their places pass, at most Burst/Rate
						// = 100 s later: ⌈100 s / Window⌉ more leases each;
						// and the pad of LeaseTarget (20 s) at 1/s.
						bound = int64(P)*k*(1+1) + 20
					case ratelimit.TokenBucket:
						bound += r.Refill * 20 // the pad: LeaseTarget (20 s) of refill
					case ratelimit.GCRA:
						bound += r.Rate * 20
					case ratelimit.LeakyBucket:
						bound += r.Rate * 20
					}
					seeds := uint64(3)
					if bk == "memory" {
						seeds = leasedSeeds // in process: cheap, so many more arrival patterns
					}
					for seed := range seeds {
						leasedBoundRun(t, bk, rs, P, k, bound, seed)
					}
				})
			}
		})
	}
}

// leasedSeeds is the number of random runs of TestLeasedBound on Memory.
var leasedSeeds uint64 = 20

func leasedBoundRun(t *testing.T, bk string, rules []ratelimit.Rule, P int, k, bound int64, seed uint64) {
	ctx := context.Background()
	clk := clock.NewFake(t0.Add(time.Duration(seed) * 37 * time.Second))
	ls := processes(t, bk, clk, P, rules, ratelimit.LeaseSize(1, k), ratelimit.LeaseFraction(1), ratelimit.LeaseTarget(20*time.Second))
	refMem := backend.NewMemory(backend.WithClock(clk))
	defer refMem.Close()
	ref, err := ratelimit.New(refMem, rules...)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 18))
	release := true
	for _, r := range rules {
		switch r.(type) {
		case ratelimit.TokenBucket, ratelimit.GCRA, ratelimit.LeakyBucket:
			release = false
		}
	}
	var admitted, denials int64
	for step := range 3000 {
		// Mostly a few ms apart, now and then a pause of up to 60 s, so that
		// leases outlive windows, buckets and their places in the buckets.
		if rng.IntN(200) == 0 {
			clk.Advance(time.Duration(rng.IntN(60000)) * ms)
		} else {
			clk.Advance(time.Duration(rng.IntN(40)) * ms)
		}
		p := rng.IntN(P)
		// Now and then a process gives its lease back. (Not on a drain rule:
		// there a give-back after another's decision leaves the units in the
		// level until their places pass, beyond the bound of held units.)
		if release && rng.IntN(20) == 0 {
			if err := ls[p].Release(ctx, "hot"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		n := int64(1)
		if rng.IntN(10) == 0 {
			n = 1 + rng.Int64N(2*k)
		}
		r, err := ls[p].AllowN(ctx, "hot", n)
		if err != nil {
			t.Fatalf("seed %d step %d: %v", seed, step, err)
		}
		if r.Allowed {
			admitted += n
			got, err := ref.AllowN(ctx, "hot", n)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Allowed {
				t.Fatalf("seed %d step %d (t=%v): process %d admitted %d units the rules do not allow: the reference denies them: %+v",
					seed, step, clk.Now().Sub(t0), p, n, got)
			}
			continue
		}
		denials++
		peek, err := ref.AllowN(ctx, "hot", 0)
		if err != nil {
			t.Fatal(err)
		}
		if peek.Remaining >= n+bound {
			t.Fatalf("seed %d step %d (t=%v): denied %d units while the rules had %d left: under-admission beyond %d",
				seed, step, clk.Now().Sub(t0), n, peek.Remaining, bound)
		}
	}
	if denials == 0 || admitted == 0 {
		t.Fatalf("seed %d: %d admitted, %d denials: the run must exhaust the rules and admit", seed, admitted, denials)
	}
}

func TestLeasedNotLeasable(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	for _, c := range []struct {
		rule ratelimit.Rule
		want string
	}{
		{ratelimit.SlidingLog{Limit: 10, Window: time.Second}, "SlidingLog"},
		{ratelimit.LeakyBucket{Rate: 10, Per: time.Second, Burst: 5}, "LeakyBucket with a Delay"},
		{ratelimit.LeakyBucket{Rate: 10, Per: time.Second, Burst: 5, Delay: 2}, "LeakyBucket with a Delay"},
	} {
		lim, err := ratelimit.New(m, ratelimit.FixedWindow{Limit: 5, Window: time.Second}, c.rule)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ratelimit.NewLeased(lim)
		if !errors.Is(err, ratelimit.ErrNotLeasable) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "rules[1]") {
			t.Errorf("%T: got %v, want ErrNotLeasable naming rules[1] and %q", c.rule, err, c.want)
		}
	}
}

func TestLeasedBadInput(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	lim, err := ratelimit.New(m, ratelimit.GCRA{Rate: 10, Per: time.Second, Burst: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		opt  ratelimit.LeaseOption
		want string
	}{
		{ratelimit.LeaseTarget(0), "LeaseTarget must be > 0 and at most MaxPeriod, got 0s"},
		{ratelimit.LeaseTarget(ratelimit.MaxPeriod + 1), "LeaseTarget must be > 0 and at most MaxPeriod, got 87600h0m0.000000001s"},
		{ratelimit.LeaseLifetime(-time.Second), "LeaseLifetime must be > 0 and at most MaxPeriod, got -1s"},
		{ratelimit.LeaseSize(0, 5), "LeaseSize needs 1 <= min <= max, got min 0, max 5"},
		{ratelimit.LeaseSize(6, 5), "LeaseSize needs 1 <= min <= max, got min 6, max 5"},
		{ratelimit.LeaseFraction(0), "LeaseFraction must be in (0, 1], got 0"},
		{ratelimit.LeaseFraction(1.5), "LeaseFraction must be in (0, 1], got 1.5"},
		{nil, "option is nil"},
	} {
		if _, err := ratelimit.NewLeased(lim, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error containing %q", err, c.want)
		}
	}
	if _, err := ratelimit.NewLeased(nil); err == nil {
		t.Error("NewLeased(nil): want an error")
	}
	l, err := ratelimit.NewLeased(lim)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.AllowN(ctx, "", 1); !errors.Is(err, backend.ErrEmptyKey) {
		t.Errorf("empty key: got %v", err)
	}
	if _, err := l.AllowN(ctx, "k", -1); !errors.Is(err, ratelimit.ErrNegativeN) {
		t.Errorf("n < 0: got %v", err)
	}
	if err := l.Release(ctx, ""); !errors.Is(err, backend.ErrEmptyKey) {
		t.Errorf("Release, empty key: got %v", err)
	}
	if err := l.Release(ctx, strings.Repeat("k", backend.MaxKeyLen+1)); err != nil { // a key (TestLongKeys)
		t.Errorf("Release, long key: got %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Allow(cctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: got %v", err)
	}
}

var _ = fmt.Sprint

// TestLeasedRealTime hammers one key from P processes (each its own
// Leased, and on Redis its own client, with the time of Redis's TIME) with
// two goroutines each, for a few hundred milliseconds, and counts what they
// admitted against the exact bound of the elapsed time, measured by the
// store's clock before the first and after the last call: for a FixedWindow
// Limit per window touched, for a SlidingWindow Limit per Window of the
// span, for a bucket its capacity plus the refill of the span.
func TestLeasedRealTime(t *testing.T) {
	const P, goroutines = 4, 2
	const run = 300 * time.Millisecond
	rules := []struct {
		name  string
		rule  ratelimit.Rule
		bound func(start, end time.Time) int64
	}{
		{"fixed_window", ratelimit.FixedWindow{Limit: 300, Window: 50 * ms}, func(s, e time.Time) int64 {
			w := int64(50 * ms / us)
			return 300 * (e.UnixMicro()/w - s.UnixMicro()/w + 1)
		}},
		{"sliding_window", ratelimit.SlidingWindow{Limit: 300, Window: 50 * ms, Buckets: 5}, func(s, e time.Time) int64 {
			return 300 * int64(e.Sub(s)/(50*ms)+1) // spans [x, x+Window) that cover [s, e]
		}},
		{"token_bucket", ratelimit.TokenBucket{Capacity: 100, Refill: 3, Every: ms}, func(s, e time.Time) int64 {
			return 100 + 3*int64((e.Sub(s)+ms-1)/ms)
		}},
		{"gcra", ratelimit.GCRA{Rate: 3, Per: ms, Burst: 100}, func(s, e time.Time) int64 {
			return 100 + 3*int64((e.Sub(s)+ms-1)/ms)
		}},
	}
	for _, bk := range []string{"memory", "redis"} {
		for _, rc := range rules {
			t.Run(bk+"/"+rc.name, func(t *testing.T) {
				ctx := context.Background()
				ls := processes(t, bk, nil, P, []ratelimit.Rule{rc.rule}, ratelimit.LeaseTarget(5*ms))
				storeNow := func() time.Time {
					if bk == "memory" {
						return time.Now()
					}
					c := redis.NewClient(&redis.Options{Addr: testenv.SharedRedis(t).Addr})
					defer c.Close()
					tm, err := c.Time(ctx).Result()
					if err != nil {
						t.Fatal(err)
					}
					return tm
				}
				start := storeNow()
				var admitted [P * goroutines]int64
				var errs [P * goroutines]error
				var wg sync.WaitGroup
				stop := time.Now().Add(run)
				for i := range P * goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for time.Now().Before(stop) {
							r, err := ls[i%P].Allow(ctx, "hot")
							if err != nil {
								errs[i] = err
								return
							}
							if r.Allowed {
								admitted[i]++
							}
						}
					}()
				}
				wg.Wait()
				end := storeNow()
				var total, decisions, fromLease, calls int64
				for i := range admitted {
					if errs[i] != nil {
						t.Fatal(errs[i])
					}
					total += admitted[i]
				}
				for _, l := range ls {
					st := l.Stats()
					decisions += st.Decisions
					fromLease += st.FromLease
					calls += st.Grants + st.Denied + st.GiveBacks
				}
				bound := rc.bound(start, end)
				t.Logf("%d admitted of %d decisions (%d store calls) over %v, bound %d (%.1f%%); %.1f%% decided from leases",
					total, decisions, calls, end.Sub(start), bound, 100*float64(total)/float64(bound), 100*float64(fromLease)/float64(decisions))
				if total > bound {
					t.Fatalf("admitted %d units, more than the rule allows in %v: %d", total, end.Sub(start), bound)
				}
				if total == 0 || fromLease == 0 {
					t.Fatalf("admitted %d, %d from leases: want both > 0", total, fromLease)
				}
			})
		}
	}
}

// TestLeasedExtremes runs leases on rules at the edges of what New accepts,
// with the largest leases and targets: decisions and give-backs stay errors
// or answers, never a panic or an overflow that admits.
func TestLeasedExtremes(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	ctx := context.Background()
	for _, rule := range []ratelimit.Rule{
		ratelimit.GCRA{Rate: 1, Per: ratelimit.MaxPeriod, Burst: 14},
		ratelimit.GCRA{Rate: 1 << 40, Per: us, Burst: 1},
		ratelimit.TokenBucket{Capacity: 0, Refill: 1, Every: time.Second},
		ratelimit.FixedWindow{Limit: 1<<53 - 1, Window: ratelimit.MaxPeriod},
		ratelimit.FixedWindow{Limit: 0, Window: time.Second},
		ratelimit.SlidingWindow{Limit: 3, Window: ratelimit.MaxPeriod, Buckets: ratelimit.MaxBuckets},
	} {
		lim, err := ratelimit.New(m, rule)
		if err != nil {
			t.Fatalf("%+v: %v", rule, err)
		}
		l, err := ratelimit.NewLeased(lim, ratelimit.LeaseSize(1, 1<<62), ratelimit.LeaseFraction(1), ratelimit.LeaseTarget(ratelimit.MaxPeriod))
		if err != nil {
			t.Fatalf("%+v: %v", rule, err)
		}
		var admitted int64
		for i := range 50 {
			r, err := l.AllowN(ctx, "k", int64(1+i%3))
			if err != nil {
				t.Fatalf("%+v: %v", rule, err)
			}
			if r.Allowed {
				admitted += int64(1 + i%3)
			}
			if r.RetryAfter < 0 && r.Allowed {
				t.Fatalf("%+v: allowed with RetryAfter %v", rule, r.RetryAfter)
			}
		}
		if r, err := l.AllowN(ctx, "k", 1<<62); err != nil || r.Allowed || r.RetryAfter >= 0 {
			t.Errorf("%+v: AllowN(2^62) = %+v, %v: want a denial that can never pass", rule, r, err)
		}
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if fw, ok := rule.(ratelimit.FixedWindow); ok && admitted > fw.Limit {
			t.Errorf("%+v: admitted %d", rule, admitted)
		}
		if sw, ok := rule.(ratelimit.SlidingWindow); ok && admitted > sw.Limit {
			t.Errorf("%+v: admitted %d", rule, admitted)
		}
	}
}

// TestLeasedFlush: Flush gives back the leases past their lifetime (window
// rules) or past their last unit's place (buckets), and forgets their keys;
// a lease still live stays.
func TestLeasedFlush(t *testing.T) {
	for _, bk := range []string{"memory", "redis"} {
		for _, rule := range []ratelimit.Rule{
			ratelimit.FixedWindow{Limit: 100, Window: time.Hour},
			ratelimit.GCRA{Rate: 1, Per: time.Second, Burst: 100},
		} {
			ctx := context.Background()
			clk := clock.NewFake(t0)
			l := processes(t, bk, clk, 1, []ratelimit.Rule{rule}, ratelimit.LeaseSize(10, 10), ratelimit.LeaseTarget(time.Second))[0]
			peek := func() int64 {
				r, err := l.Limiter().AllowN(ctx, "k", 0)
				if err != nil {
					t.Fatal(err)
				}
				return r.Remaining
			}
			if r, err := l.Allow(ctx, "k"); err != nil || !r.Allowed {
				t.Fatalf("%s %T: %+v %v", bk, rule, r, err)
			}
			before := peek()
			if err := l.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if got := peek(); got != before {
				t.Errorf("%s %T: a live lease was flushed: %d left, want %d", bk, rule, got, before)
			}
			clk.Advance(time.Minute) // past the lifetime (2 s) and every place (≤ 11 s)
			if err := l.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			want := int64(99) // the window: 9 given back
			if _, ok := rule.(ratelimit.GCRA); ok {
				want = 100 // drained
			}
			if got := peek(); got != want {
				t.Errorf("%s %T: after Flush %d left, want %d", bk, rule, got, want)
			}
			if st := l.Stats(); st.GiveBacks != 1 {
				t.Errorf("%s %T: %d give-backs, want 1", bk, rule, st.GiveBacks)
			}
		}
	}
}

// TestLeasedWait: Wait takes a unit as soon as one is back, from a lease or
// the store, and gives up with the context's error when the next chance is
// past the deadline.
func TestLeasedWait(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	lim, err := ratelimit.New(m, ratelimit.GCRA{Rate: 100, Per: time.Second, Burst: 2})
	if err != nil {
		t.Fatal(err)
	}
	l, err := ratelimit.NewLeased(lim, ratelimit.LeaseTarget(ms))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	for range 6 {
		if err := l.Wait(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	// 6 units at 100/s with a burst of 2: the last ones wait about 10 ms each.
	if d := time.Since(start); d < 30*ms {
		t.Errorf("6 units in %v: the rule allows no more than 2 + 100/s", d)
	}
	dctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	for range 3 {
		_ = l.WaitN(dctx, "k", 2) // drain
	}
	if err := l.WaitN(dctx, "k", 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitN past the deadline: got %v, want DeadlineExceeded", err)
	}
	if err := l.WaitN(ctx, "k", 3); err == nil || !strings.Contains(err.Error(), "can ever admit") {
		t.Errorf("WaitN of more than the burst: got %v", err)
	}
}

// TestLeasedConcurrentAccounting: goroutines deciding one key from its
// lease (without the key's lock), while others Release and Flush it, in two
// processes on one store: once every lease is closed, the store's count is
// exactly the units admitted — no unit was both admitted and given back,
// none admitted twice, none lost — and the counters add up.
func TestLeasedConcurrentAccounting(t *testing.T) {
	for _, bk := range []string{"memory", "redis"} {
		t.Run(bk, func(t *testing.T) {
			if bk == "redis" && testing.Short() {
				testenv.SharedRedis(t) // skips under -short, naming what is missing
			}
			const limit = 100000
			ctx := context.Background()
			ls := processes(t, bk, nil, 2, []ratelimit.Rule{ratelimit.FixedWindow{Limit: limit, Window: time.Hour}},
				ratelimit.LeaseSize(1, 64), ratelimit.LeaseTarget(time.Hour), ratelimit.LeaseFlushEvery(-1))
			var admitted, calls atomic.Int64
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for _, l := range ls {
				for range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for calls.Load() < limit+2000 {
							n := 1 + calls.Add(1)%3
							r, err := l.AllowN(ctx, "k", n)
							if err != nil {
								t.Error(err)
								return
							}
							if r.Allowed {
								admitted.Add(n)
							}
						}
					}()
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						var err error
						if i%2 == 0 {
							err = l.Release(ctx, "k")
						} else {
							err = l.Close(ctx)
						}
						if err != nil {
							t.Error(err)
							return
						}
						time.Sleep(50 * time.Microsecond)
					}
				}()
			}
			for calls.Load() < limit+2000 && !t.Failed() {
				time.Sleep(time.Millisecond)
			}
			close(stop)
			wg.Wait()
			var decisions int64
			for _, l := range ls {
				if err := l.Close(ctx); err != nil {
					t.Fatal(err)
				}
				st := l.Stats()
				decisions += st.Decisions
				if st.FromLease+st.Grants+st.Denied != st.Decisions {
					t.Errorf("stats %+v: from lease + grants + denied != decisions", st)
				}
			}
			r, err := ls[0].Limiter().AllowN(ctx, "k", 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := limit - r.Remaining; got != admitted.Load() {
				t.Errorf("the store counts %d units, %d were admitted", got, admitted.Load())
			}
			if admitted.Load() > limit {
				t.Errorf("admitted %d > limit %d", admitted.Load(), limit)
			}
			if decisions != calls.Load() {
				t.Errorf("%d decisions counted, %d made", decisions, calls.Load())
			}
		})
	}
}
