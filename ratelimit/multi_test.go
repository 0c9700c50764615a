package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// allowAll calls AllowAll and fails the test on an error.
func allowAll(t testing.TB, reqs ...ratelimit.Request) (bool, []ratelimit.Result) {
	t.Helper()
	res := make([]ratelimit.Result, len(reqs))
	ok, err := ratelimit.AllowAll(context.Background(), reqs, res)
	if err != nil {
		t.Fatal(err)
	}
	return ok, res
}

func allowN(t testing.TB, lim *ratelimit.Limiter, key string, n int64) ratelimit.Result {
	t.Helper()
	r, err := lim.AllowN(context.Background(), key, n)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// notConsumed is what AllowAll reports for a request that alone would be
// admitted when another one is denied: a peek, not allowed.
func notConsumed(r ratelimit.Result) ratelimit.Result {
	r.Allowed = false
	return r
}

// mixedRules are one Limiter per algorithm and two with several rules (two
// SlidingLog rules in one log and a FixedWindow; drain and fixed-window
// rules, whose values share one string), with small limits so that random
// traffic is often denied.
func mixedRules() [][]ratelimit.Rule { return mixedRulesPer(1) }

// mixedRulesPer is mixedRules with every period k times as long. A test that
// holds a fake clock still while it makes many calls needs periods longer
// than its calls take in real time: on Redis a key's TTL (time to full, or
// to the end of its window) runs on the server's clock, and a key that
// expires is read as a fresh one.
func mixedRulesPer(k time.Duration) [][]ratelimit.Rule {
	s := time.Second * k
	ms := ms * k
	return [][]ratelimit.Rule{
		{ratelimit.FixedWindow{Limit: 3, Window: s}},
		{ratelimit.SlidingWindow{Limit: 4, Window: s, Buckets: 4}},
		{ratelimit.SlidingLog{Limit: 3, Window: 500 * ms}},
		{ratelimit.TokenBucket{Capacity: 3, Refill: 1, Every: 300 * ms}},
		{ratelimit.LeakyBucket{Rate: 2, Per: s, Burst: 2, Delay: 1}},
		{ratelimit.GCRA{Rate: 3, Per: s, Burst: 2}},
		{
			ratelimit.SlidingLog{Limit: 2, Window: 100 * ms},
			ratelimit.Named("per-second", ratelimit.SlidingLog{Limit: 4, Window: s}),
			ratelimit.FixedWindow{Limit: 5, Window: s},
		},
		{
			ratelimit.GCRA{Rate: 4, Per: s, Burst: 3},
			ratelimit.FixedWindow{Limit: 6, Window: s},
			ratelimit.Named("slow", ratelimit.TokenBucket{Capacity: 5, Refill: 1, Every: 500 * ms}),
		},
	}
}

func newLimiters(t testing.TB, b backend.Backend, sets [][]ratelimit.Rule) []*ratelimit.Limiter {
	t.Helper()
	lims := make([]*ratelimit.Limiter, len(sets))
	for i, rs := range sets {
		var err error
		if lims[i], err = ratelimit.New(b, rs...); err != nil {
			t.Fatal(err)
		}
	}
	return lims
}

func TestAllowAllAllOrNothing(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			// The clock stands still through about 150 calls: periods of at
			// least 6s outlast them on a busy machine (see mixedRulesPer;
			// with 100ms a token bucket's key expired under -race and load).
			lims := newLimiters(t, bk.make(t, clk), mixedRulesPer(60))
			reqs := make([]ratelimit.Request, len(lims))
			for i, l := range lims {
				reqs[i] = ratelimit.Request{Limiter: l, Key: fmt.Sprint("user-", i), N: 1}
			}
			peekAll := func() []ratelimit.Result {
				out := make([]ratelimit.Result, len(reqs))
				for i, q := range reqs {
					out[i] = allowN(t, q.Limiter, q.Key, 0)
				}
				return out
			}
			before := peekAll()
			if ok, res := allowAll(t, reqs...); !ok {
				t.Fatalf("first call denied: %+v", res)
			}
			after := peekAll()
			for i := range reqs {
				if after[i].Remaining != before[i].Remaining-1 {
					t.Errorf("reqs[%d]: Remaining %d after one admitted unit, want %d", i, after[i].Remaining, before[i].Remaining-1)
				}
			}

			// One request over its limit: nothing is consumed from any key.
			for over := range reqs {
				for _, n := range []int64{after[over].Remaining + 1, 100} { // over the current budget; never admissible
					q := append([]ratelimit.Request(nil), reqs...)
					q[over].N = n
					ok, res := allowAll(t, q...)
					if ok {
						t.Fatalf("reqs[%d].N = %d admitted: %+v", over, n, res)
					}
					for i, r := range res {
						switch {
						case r.Allowed:
							t.Errorf("reqs[%d].N = %d: results[%d].Allowed is true", over, n, i)
						case i == over && r.RetryAfter == 0:
							t.Errorf("reqs[%d].N = %d: its own result has RetryAfter 0: %+v", over, n, r)
						case i == over && n == 100 && r.RetryAfter >= 0:
							t.Errorf("reqs[%d].N = 100 can never be admitted, got RetryAfter %v", over, r.RetryAfter)
						case i != over && (r.RetryAfter != 0 || r != notConsumed(after[i])):
							t.Errorf("reqs[%d].N = %d: results[%d] = %+v, want the peek %+v", over, n, i, r, notConsumed(after[i]))
						}
					}
					if got := peekAll(); !equalResults(got, after) {
						t.Fatalf("reqs[%d].N = %d consumed something:\n got %+v\nwant %+v", over, n, got, after)
					}
				}
			}
		})
	}
}

func equalResults(a, b []ratelimit.Result) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestAllowAllDifferential runs random AllowAll calls over the mixed Limiters
// on one key set and replays them with AllowN on a second key set of the same
// backend: an admitted call must report exactly AllowN's results; a denied
// one AllowN's denial for every request over its limit and a peek for the
// others, and must consume nothing (which the replay checks at every later
// call).
func TestAllowAllDifferential(t *testing.T) {
	calls := 200
	if testing.Short() {
		calls = 50
	}
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(42, uint64(len(bk.name))))
			clk := clock.NewFake(t0.Add(time.Duration(rng.Int64N(int64(time.Hour)))))
			lims := newLimiters(t, bk.make(t, clk), mixedRules())
			var admitted, denied int
			last := time.Now()
			for c := range calls {
				// Redis expires keys on its own clock: a step covers at
				// least the real time since the last step (as in
				// TestDifferential), or a key could vanish in Redis before
				// its state ends on the fake clock on a busy machine.
				step := time.Duration(rng.Int64N(int64(150 * ms)))
				if spent := time.Since(last) + 10*ms; spent > step {
					step = spent
				}
				last = time.Now()
				clk.Advance(step)
				var reqs []ratelimit.Request
				for _, li := range rng.Perm(len(lims))[:1+rng.IntN(len(lims))] {
					n := rng.Int64N(3)
					if rng.IntN(30) == 0 {
						n = 6 // never admissible
					}
					reqs = append(reqs, ratelimit.Request{Limiter: lims[li], Key: fmt.Sprint("a", li), N: n})
				}
				ok, res := allowAll(t, reqs...)
				over := 0
				for i, q := range reqs {
					ref := strings.Replace(q.Key, "a", "b", 1)
					var want ratelimit.Result
					switch {
					case ok:
						want = allowN(t, q.Limiter, ref, q.N)
					case res[i].RetryAfter != 0:
						over++
						want = allowN(t, q.Limiter, ref, q.N) // denied: consumes nothing
					default:
						want = notConsumed(allowN(t, q.Limiter, ref, 0))
						if want.Remaining < q.N {
							t.Errorf("call %d: reqs[%d] reported as fitting, but only %d of %d units remain", c, i, want.Remaining, q.N)
						}
					}
					if res[i] != want {
						t.Fatalf("call %d (allowed %v), reqs[%d] (Limiter %s, N %d):\n got %+v\nwant %+v", c, ok, i, q.Key, q.N, res[i], want)
					}
				}
				if ok {
					admitted++
				} else {
					denied++
					if over == 0 {
						t.Fatalf("call %d denied, but no request reports being over its limit: %+v", c, res)
					}
				}
			}
			if admitted < calls/10 || denied < calls/10 {
				t.Errorf("%d calls admitted and %d denied: the scenario does not exercise both", admitted, denied)
			}
		})
	}
}

// TestAllowAllDeniedResults pins the Results of a denied call: AllowN's own
// denial for requests over their limit, a peek for the others.
func TestAllowAllDeniedResults(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			lims := newLimiters(t, bk.make(t, clk), [][]ratelimit.Rule{
				{ratelimit.FixedWindow{Limit: 2, Window: time.Second}},
				{ratelimit.TokenBucket{Capacity: 3, Refill: 1, Every: 300 * ms}},
				{ratelimit.GCRA{Rate: 3, Per: time.Second, Burst: 2}},
				{ratelimit.LeakyBucket{Rate: 2, Per: time.Second, Burst: 2}},
			})
			fixed, bucket, gcra, leaky := lims[0], lims[1], lims[2], lims[3]
			allowN(t, fixed, "f", 2)
			allowN(t, bucket, "t", 1)
			allowN(t, leaky, "l", 1)
			clk.Advance(100 * ms)
			ok, got := allowAll(t,
				ratelimit.Request{Limiter: fixed, Key: "f", N: 1},
				ratelimit.Request{Limiter: bucket, Key: "t", N: 2},
				ratelimit.Request{Limiter: gcra, Key: "g", N: 5},
				ratelimit.Request{Limiter: leaky, Key: "l", N: 1},
			)
			want := []ratelimit.Result{
				denied(2, 0, 900*ms, 900*ms),                   // the window is full
				{Limit: 3, Remaining: 2, ResetAfter: 200 * ms}, // 2 would fit: untouched
				denied(2, 2, -1, 0),                            // more than the burst: never
				{Limit: 3, Remaining: 2, ResetAfter: 400 * ms}, // would fit, with a Delay: untouched, no Delay
			}
			if ok || !equalResults(got, want) {
				t.Fatalf("allowed %v\n got %+v\nwant %+v", ok, got, want)
			}
			// Nothing was taken: the bucket still has its 2 tokens, the leaky
			// bucket its room.
			if r := allowN(t, bucket, "t", 2); !r.Allowed || r.Remaining != 0 {
				t.Errorf("token bucket after the denied call: %+v", r)
			}
			if r := allowN(t, leaky, "l", 2); !r.Allowed || r.Remaining != 0 {
				t.Errorf("leaky bucket after the denied call: %+v", r)
			}
		})
	}
}

// TestAllowAllSharedState checks requests that name the same rule state: the
// same Limiter and key twice, and different Limiters with identical rules.
func TestAllowAllSharedState(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			b := bk.make(t, clk)
			logs := []ratelimit.Rule{ratelimit.SlidingLog{Limit: 3, Window: time.Second}, ratelimit.SlidingLog{Limit: 5, Window: time.Minute}}
			fixed := ratelimit.FixedWindow{Limit: 5, Window: time.Minute}
			lims := newLimiters(t, b, [][]ratelimit.Rule{
				{fixed},
				logs,
				{ratelimit.GCRA{Rate: 1, Per: time.Minute, Burst: 3}},
				{ratelimit.GCRA{Rate: 1, Per: time.Minute, Burst: 3}},
				{ratelimit.SlidingWindow{Limit: 4, Window: time.Second, Buckets: 4}},
				{ratelimit.SlidingWindow{Limit: 4, Window: time.Second, Buckets: 4}},
				{fixed, ratelimit.TokenBucket{Capacity: 10, Refill: 1, Every: time.Second}},
			})
			lf, ll, g1, g2, s1, s2, lft := lims[0], lims[1], lims[2], lims[3], lims[4], lims[5], lims[6]
			req := func(l *ratelimit.Limiter, key string, n int64) ratelimit.Request {
				return ratelimit.Request{Limiter: l, Key: key, N: n}
			}
			same := func(step string, wantOK bool, res []ratelimit.Result, want ratelimit.Result, ok bool) {
				t.Helper()
				if ok != wantOK || res[0] != want || res[1] != want {
					t.Fatalf("%s: allowed %v, results\n %+v\n %+v\nwant %v and both %+v", step, ok, res[0], res[1], wantOK, want)
				}
			}

			// The same Limiter and key twice: one request of the summed N.
			ok, res := allowAll(t, req(lf, "k", 2), req(lf, "k", 2))
			same("fixed 2+2", true, res, allowN(t, lf, "ref", 4), ok)
			ok, res = allowAll(t, req(lf, "k", 1), req(lf, "k", 1))
			same("fixed 1+1 over", false, res, allowN(t, lf, "ref", 2), ok)
			if res[0].RetryAfter <= 0 {
				t.Errorf("fixed 1+1: RetryAfter %v, want > 0", res[0].RetryAfter)
			}
			ok, res = allowAll(t, req(lf, "k", 1), req(lf, "k", 0))
			same("fixed 1+0", true, res, allowN(t, lf, "ref", 1), ok)

			// Two SlidingLog rules in one log: three units logged once.
			ok, res = allowAll(t, req(ll, "k", 1), req(ll, "k", 2))
			same("log 1+2", true, res, allowN(t, ll, "ref", 3), ok)
			clk.Advance(time.Second)
			if r, want := allowN(t, ll, "k", 0), allowN(t, ll, "ref", 0); r != want || r.Remaining != 2 {
				t.Errorf("log after a second: %+v, want %+v with Remaining 2 (5 per minute, 3 taken)", r, want)
			}

			// Different Limiters, identical rules: one state, checked with the
			// units of both.
			ok, res = allowAll(t, req(g1, "k", 2), req(g2, "k", 2))
			same("gcra 2+2 over", false, res, allowN(t, g1, "ref", 4), ok)
			ok, res = allowAll(t, req(g1, "k", 1), req(g2, "k", 2))
			same("gcra 1+2", true, res, allowN(t, g1, "ref", 3), ok)
			if r := allowN(t, g2, "k", 1); r.Allowed {
				t.Errorf("gcra after 3 units of a burst of 3: %+v", r)
			}

			// Sliding window: the shared state stays consistent over time.
			ok, res = allowAll(t, req(s1, "k", 1), req(s2, "k", 2))
			same("sliding 1+2", true, res, allowN(t, s1, "ref", 3), ok)
			for i := range 8 {
				clk.Advance(200 * ms)
				ok, res = allowAll(t, req(s1, "k", 1), req(s2, "k", 1))
				same(fmt.Sprint("sliding step ", i), res[0].Allowed, res, allowN(t, s1, "ref", 2), ok)
			}

			// Overlapping rule sets are different Limiters: each keeps its
			// own state, even of the FixedWindow they both have.
			ok, res = allowAll(t, req(lf, "o", 2), req(lft, "o", 3))
			if !ok || res[0] != allowN(t, lf, "o-ref", 2) || res[1] != allowN(t, lft, "o-ref", 3) {
				t.Fatalf("overlapping rules: allowed %v, %+v", ok, res)
			}
			if r := allowN(t, lft, "o", 2); !r.Allowed || r.Remaining != 0 {
				t.Errorf("overlapping rules: the second Limiter's fixed window must hold its own 3 of 5: %+v", r)
			}
		})
	}
}

func TestAllowAllBadInput(t *testing.T) {
	ctx := context.Background()
	m := backend.NewMemory()
	defer m.Close()
	m2 := backend.NewMemory()
	defer m2.Close()
	rule := ratelimit.FixedWindow{Limit: 1, Window: time.Minute}
	lim, _ := ratelimit.New(m, rule)
	other, _ := ratelimit.New(m2, rule)
	onRedis, _ := ratelimit.New(newRedis(t, nil), rule)
	ok := ratelimit.Request{Limiter: lim, Key: "k", N: 1}
	cases := []struct {
		name    string
		reqs    []ratelimit.Request
		results int
		is      error
		want    string
	}{
		{"short results", []ratelimit.Request{ok, ok}, 1, nil, "len(results) is 1, want len(reqs) = 2"},
		{"nil Limiter", []ratelimit.Request{ok, {Key: "k", N: 1}}, 2, nil, "reqs[1].Limiter is nil"},
		{"zero Limiter", []ratelimit.Request{ok, {Limiter: &ratelimit.Limiter{}, Key: "k"}}, 2, nil, "reqs[1].Limiter was not made by New"},
		{"empty key", []ratelimit.Request{ok, ok, {Limiter: lim, N: 1}}, 3, backend.ErrEmptyKey, "(reqs[2])"},
		{"long key, empty key", []ratelimit.Request{{Limiter: lim, Key: strings.Repeat("x", backend.MaxKeyLen+1)}, {Limiter: lim}}, 2, backend.ErrEmptyKey, "(reqs[1])"},
		{"negative N", []ratelimit.Request{ok, {Limiter: lim, Key: "j", N: -3}}, 2, ratelimit.ErrNegativeN, "got -3 (reqs[1])"},
		{"two memories", []ratelimit.Request{ok, {Limiter: other, Key: "k"}}, 2, nil, "reqs[1].Limiter uses another backend than reqs[0].Limiter"},
		{"memory and redis", []ratelimit.Request{ok, ok, {Limiter: onRedis, Key: "k"}}, 3, nil, "reqs[2].Limiter uses another backend"},
	}
	for _, c := range cases {
		allowed, err := ratelimit.AllowAll(ctx, c.reqs, make([]ratelimit.Result, c.results))
		switch {
		case err == nil:
			t.Errorf("%s: no error (allowed %v)", c.name, allowed)
		case allowed:
			t.Errorf("%s: allowed with an error", c.name)
		case c.is != nil && !errors.Is(err, c.is):
			t.Errorf("%s: %v is not %v", c.name, err, c.is)
		case !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: %q does not say %q", c.name, err, c.want)
		}
	}
	if allowed, err := ratelimit.AllowAll(ctx, nil, nil); !allowed || err != nil {
		t.Errorf("no requests: %v, %v; want true, nil", allowed, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := ratelimit.AllowAll(cancelled, []ratelimit.Request{ok}, make([]ratelimit.Result, 1)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	if r := allowN(t, lim, "k", 0); r.Remaining != 1 {
		t.Errorf("a rejected call consumed: %+v", r)
	}
}

// TestAllowAllConcurrent runs AllowAll from 16 goroutines over overlapping
// key sets, in random orders, then takes what is left one key at a time. The
// clock stands still, so every key admits exactly its limit in total: no
// deadlock, no over-admission, nothing consumed unreported.
func TestAllowAllConcurrent(t *testing.T) {
	const limit = 20
	sets := [][]ratelimit.Rule{
		{ratelimit.FixedWindow{Limit: limit, Window: time.Hour}},
		{ratelimit.SlidingWindow{Limit: limit, Window: time.Hour, Buckets: 60}},
		{ratelimit.SlidingLog{Limit: limit, Window: time.Hour}},
		{ratelimit.TokenBucket{Capacity: limit, Refill: 1, Every: time.Hour}},
		{ratelimit.LeakyBucket{Rate: 1, Per: time.Hour, Burst: limit - 1, Delay: ratelimit.NoDelay}},
		{ratelimit.GCRA{Rate: 1, Per: time.Hour, Burst: limit}},
	}
	kinds := append(allBackends(), kindOfBackend{"memory-2-shards", func(t testing.TB, clk clock.Clock) backend.Backend {
		m := backend.NewMemory(backend.WithClock(clk), backend.WithShards(2))
		t.Cleanup(func() { m.Close() })
		return m
	}})
	for _, bk := range kinds {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			calls := 300
			if !strings.HasPrefix(bk.name, "memory") {
				calls = 40
			}
			clk := clock.NewFake(t0)
			lims := newLimiters(t, bk.make(t, clk), sets)
			var admitted [6]atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					for range calls {
						var reqs []ratelimit.Request
						var which []int
						for _, k := range rng.Perm(len(lims))[:1+rng.IntN(3)] {
							reqs = append(reqs, ratelimit.Request{Limiter: lims[k], Key: "k" + strconv.Itoa(k), N: 1})
							which = append(which, k)
						}
						res := make([]ratelimit.Result, len(reqs))
						ok, err := ratelimit.AllowAll(context.Background(), reqs, res)
						if err != nil {
							errs <- err
							return
						}
						for i, r := range res {
							if r.Allowed {
								admitted[which[i]].Add(1)
							} else if ok {
								errs <- fmt.Errorf("allowed call with a denied result: %+v", res)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for k, l := range lims {
				key := "k" + strconv.Itoa(k)
				for {
					ok, _ := allowAll(t, ratelimit.Request{Limiter: l, Key: key, N: 1})
					if !ok {
						break
					}
					admitted[k].Add(1)
				}
				if got := admitted[k].Load(); got != limit {
					t.Errorf("%T: admitted %d, want exactly %d", sets[k][0], got, limit)
				}
			}
		})
	}
}

// TestAllowAllClusterSlots decides requests on keys in different hash slots
// and in one slot on the Redis Cluster.
func TestAllowAllClusterSlots(t *testing.T) {
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.SharedCluster(t).Addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	clk := clock.NewFake(t0)
	b, err := backend.NewRedis(cc, backendtest.Options(clk)...)
	if err != nil {
		t.Fatal(err)
	}
	slot := func(key string) int64 {
		s, err := cc.ClusterKeySlot(ctx, unwrap.Redis(b).Key(key, "x")).Result()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// "alice" and "bob" lie in different slots; "user:98" and "user:2964" in one.
	if slot("alice") == slot("bob") || slot("user:98") != slot("user:2964") {
		t.Fatal("the test's keys do not lie in the slots it assumes")
	}
	lims := newLimiters(t, b, [][]ratelimit.Rule{
		{ratelimit.FixedWindow{Limit: 2, Window: time.Minute}},
		{ratelimit.TokenBucket{Capacity: 3, Refill: 1, Every: time.Minute}, ratelimit.SlidingLog{Limit: 3, Window: time.Minute}},
	})
	fixed, bucket := lims[0], lims[1]

	for _, keys := range [][2]string{{"alice", "bob"}, {"user:98", "user:2964"}} {
		a, c := keys[0], keys[1]
		ok, res := allowAll(t, ratelimit.Request{Limiter: fixed, Key: a, N: 2}, ratelimit.Request{Limiter: bucket, Key: c, N: 1})
		if !ok || res[0].Remaining != 0 || res[1].Remaining != 2 {
			t.Fatalf("%v: first call: %v %+v", keys, ok, res)
		}
		// a is full: c must stay untouched.
		ok, res = allowAll(t, ratelimit.Request{Limiter: bucket, Key: c, N: 2}, ratelimit.Request{Limiter: fixed, Key: a, N: 1})
		if ok || res[0].Allowed || res[0].RetryAfter != 0 || res[0].Remaining != 2 || res[1].RetryAfter <= 0 {
			t.Fatalf("%v: over-limit call: %v %+v", keys, ok, res)
		}
		if r := allowN(t, bucket, c, 0); r.Remaining != 2 {
			t.Fatalf("%v: a denied call consumed from %s: %+v", keys, c, r)
		}
	}
}

// hookScripter runs scripts on a Cluster client and calls before ahead of
// every EVALSHA, so that a test can act between AllowAll's two phases.
type hookScripter struct {
	c      *redis.ClusterClient
	before func(keys, args []string)
}

func (h hookScripter) EvalSha(ctx context.Context, sha string, keys, args []string) (any, error) {
	h.before(keys, args)
	return h.result(h.c.EvalSha(ctx, sha, keys, anyArgs(args)...).Result())
}

func (h hookScripter) Eval(ctx context.Context, src string, keys, args []string) (any, error) {
	return h.result(h.c.Eval(ctx, src, keys, anyArgs(args)...).Result())
}

func (hookScripter) result(v any, err error) (any, error) {
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

func anyArgs(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}

// TestAllowAllClusterRace has another client consume between the check and
// the commit of a call across slots. Groups commit in slot order: when the
// first group is the one raced, nothing is consumed; when the second is, the
// first group's units stay consumed and its result says so.
func TestAllowAllClusterRace(t *testing.T) {
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.SharedCluster(t).Addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	slotOf := func(key string) int64 {
		s, err := cc.ClusterKeySlot(ctx, "{"+key+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first, second := "alice", "bob"
	if slotOf(first) > slotOf(second) {
		first, second = second, first
	}
	for _, raced := range []string{first, second} {
		t.Run(raced, func(t *testing.T) {
			clk := clock.NewFake(t0)
			opts := backendtest.Options(clk)
			rule := ratelimit.FixedWindow{Limit: 3, Window: time.Minute}
			direct, err := backend.NewRedis(cc, opts...) // the other client
			if err != nil {
				t.Fatal(err)
			}
			other, _ := ratelimit.New(direct, rule)
			var fired atomic.Bool
			hooked, err := backend.NewRedisScripter(hookScripter{cc, func(keys, args []string) {
				commit := args[1] == "0"
				onlyRaced := len(keys) > 0 && strings.Contains(keys[0], "{"+raced+"}") && strings.Contains(keys[len(keys)-1], "{"+raced+"}")
				if commit && onlyRaced && fired.CompareAndSwap(false, true) {
					if r := allowN(t, other, raced, 3); !r.Allowed {
						t.Errorf("the other client was denied: %+v", r)
					}
				}
			}}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			lim, _ := ratelimit.New(hooked, rule)
			ok, res := allowAll(t, ratelimit.Request{Limiter: lim, Key: second, N: 1}, ratelimit.Request{Limiter: lim, Key: first, N: 1})
			if !fired.Load() {
				t.Fatal("the commit of the raced group never ran")
			}
			if ok {
				t.Fatalf("allowed, though %s was full at its commit: %+v", raced, res)
			}
			rSecond, rFirst := res[0], res[1]
			if raced == first {
				if rFirst.Allowed || rFirst.RetryAfter <= 0 {
					t.Errorf("%s (raced): %+v, want denied", first, rFirst)
				}
				if rSecond != notConsumed(allowN(t, other, second, 0)) || rSecond.Remaining != 3 {
					t.Errorf("%s after the first group was denied: %+v, want untouched", second, rSecond)
				}
			} else {
				if !rFirst.Allowed || rFirst.Remaining != 2 || allowN(t, other, first, 0).Remaining != 2 {
					t.Errorf("%s committed before the second group was denied: %+v, want Allowed with 2 left", first, rFirst)
				}
				if rSecond.Allowed || rSecond.RetryAfter <= 0 {
					t.Errorf("%s (raced): %+v, want denied", second, rSecond)
				}
			}
		})
	}
}

// BenchmarkAllowAll compares one AllowAll of three requests with three
// AllowN calls on the memory backend.
func BenchmarkAllowAll(b *testing.B) {
	m := backend.NewMemory()
	defer m.Close()
	lims := newLimiters(b, m, [][]ratelimit.Rule{
		{ratelimit.GCRA{Rate: 1e9, Per: time.Second, Burst: 1e6}},
		{ratelimit.FixedWindow{Limit: 1e12, Window: time.Second}},
		{ratelimit.TokenBucket{Capacity: 1e6, Refill: 1e9, Every: time.Second}},
	})
	reqs := []ratelimit.Request{
		{Limiter: lims[0], Key: "user:42", N: 1},
		{Limiter: lims[1], Key: "route:/search", N: 1},
		{Limiter: lims[2], Key: "tenant:7", N: 1},
	}
	ctx := context.Background()
	b.Run("AllowAll", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			res := make([]ratelimit.Result, len(reqs))
			for pb.Next() {
				if _, err := ratelimit.AllowAll(ctx, reqs, res); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("3xAllowN", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				for _, q := range reqs {
					if _, err := q.Limiter.AllowN(ctx, q.Key, q.N); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	})
}

// TestAllowAllMany decides 60 requests over 12 keys, each key named five
// times, so that shared states are found by index rather than by scan.
func TestAllowAllMany(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			lims := newLimiters(t, bk.make(t, clk), [][]ratelimit.Rule{
				{ratelimit.FixedWindow{Limit: 5, Window: time.Minute}},
				{ratelimit.SlidingLog{Limit: 5, Window: time.Minute}, ratelimit.SlidingLog{Limit: 10, Window: time.Hour}},
				{ratelimit.GCRA{Rate: 1, Per: time.Minute, Burst: 5}},
			})
			var reqs []ratelimit.Request
			for rep := range 5 {
				for k := range 12 {
					reqs = append(reqs, ratelimit.Request{Limiter: lims[k%3], Key: fmt.Sprint("key-", k), N: int64(rep % 2)})
				}
			}
			// Units per key: 0+1+0+1+0 = 2.
			ok, res := allowAll(t, reqs...)
			if !ok {
				t.Fatalf("denied: %+v", res)
			}
			for i, r := range res {
				if r.Remaining != 3 {
					t.Fatalf("results[%d] = %+v, want Remaining 3", i, r)
				}
			}
			for i := range reqs {
				reqs[i].N = 1 // 5 per key: one more than is left
			}
			if ok, res = allowAll(t, reqs...); ok || res[0].RetryAfter == 0 || res[0] != res[12] {
				t.Fatalf("over the limit: allowed %v, %+v", ok, res[:13])
			}
			for k := range 12 {
				if r := allowN(t, lims[k%3], fmt.Sprint("key-", k), 3); !r.Allowed || r.Remaining != 0 {
					t.Fatalf("key-%d after the denied call: %+v, want 3 left", k, r)
				}
			}
		})
	}
}

// TestAllowAllAndAllowNShareState: AllowN (a fast path where the Limiter has
// one) and AllowAll (the general script) read and write one state: random
// calls of both on the same keys give every Redis backend the results of the
// memory backend.
func TestAllowAllAndAllowNShareState(t *testing.T) {
	type step struct {
		all  bool
		lim  int
		n    int64
		wait time.Duration
	}
	rng := rand.New(rand.NewPCG(7, 7))
	var steps []step
	for range 300 {
		steps = append(steps, step{all: rng.IntN(2) == 0, lim: rng.IntN(len(mixedRules())), n: rng.Int64N(3), wait: time.Duration(rng.Int64N(int64(120 * ms)))})
	}
	play := func(t *testing.T, b backend.Backend, clk *clock.Fake) []ratelimit.Result {
		lims := newLimiters(t, b, mixedRules())
		var out []ratelimit.Result
		for _, s := range steps {
			clk.Advance(s.wait)
			key := fmt.Sprint("k", s.lim)
			if s.all {
				_, res := allowAll(t, ratelimit.Request{Limiter: lims[s.lim], Key: key, N: s.n})
				out = append(out, res[0])
			} else {
				out = append(out, allowN(t, lims[s.lim], key, s.n))
			}
		}
		return out
	}
	var want []ratelimit.Result
	for _, bk := range allBackends() {
		clk := clock.NewFake(t0)
		got := play(t, bk.make(t, clk), clk)
		if want == nil {
			want = got // memory comes first
			continue
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: step %d (%+v): %+v, memory gave %+v", bk.name, i, steps[i], got[i], want[i])
			}
		}
	}
}
