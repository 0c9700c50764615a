package degraded

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

var t0 = time.Unix(1_800_000_000, 0) // a whole minute

// fixture is a store limiter (on memory, standing in for the store) of a
// fixed window of 100 a minute, and Limits for servers servers, on one
// fake clock.
type fixture struct {
	clk   *clock.Fake
	store *ratelimit.Limiter
	rule  ratelimit.Rule
	l     *Limits
}

func newFixture(t *testing.T, servers int) *fixture {
	t.Helper()
	clk := clock.NewFake(t0)
	mem := backend.NewMemory(backend.WithClock(clk))
	t.Cleanup(func() { mem.Close() })
	rule := ratelimit.FixedWindow{Limit: 100, Window: time.Minute}
	store, err := ratelimit.New(mem, rule)
	if err != nil {
		t.Fatal(err)
	}
	l := New(Options{Servers: func() int { return servers }, Clock: clk})
	t.Cleanup(func() { l.Close() })
	return &fixture{clk: clk, store: store, rule: rule, l: l}
}

// storeAllow is one request decided by the store, as the server does it:
// debts charged, the result seen.
func (f *fixture) storeAllow(t *testing.T, key string, n int64) bool {
	t.Helper()
	reqs := []ratelimit.Request{{Limiter: f.store, Key: key, N: n}}
	res := make([]ratelimit.Result, 1)
	added := f.l.Charge(reqs)
	ok, err := ratelimit.AllowAll(context.Background(), reqs, res)
	f.l.Paid(reqs, res, added, err == nil)
	if err != nil {
		t.Fatal(err)
	}
	f.l.Seen(reqs, res, nil, f.clk.Now())
	return ok
}

// localAllow is one request decided in process.
func (f *fixture) localAllow(t *testing.T, key string, n int64) bool {
	t.Helper()
	res := make([]ratelimit.Result, 1)
	ok, err := f.l.Decide(context.Background(), []ratelimit.Request{{Limiter: f.store, Key: key, N: n}},
		[][]ratelimit.Rule{{f.rule}}, []time.Duration{time.Minute}, res)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// call decides reqs (on f.store) through f.l.Call, as the server and the
// fallback do, and returns the units its spend callback spent at the store.
func (f *fixture) call(t *testing.T, reqs []ratelimit.Request, res []ratelimit.Result) int64 {
	t.Helper()
	ctx := context.Background()
	spent := int64(0)
	err := f.l.Call(ctx, reqs, res, nil, func() ([][]ratelimit.Rule, []time.Duration) {
		rules, windows := make([][]ratelimit.Rule, len(reqs)), make([]time.Duration, len(reqs))
		for i := range reqs {
			rules[i], windows[i] = []ratelimit.Rule{f.rule}, time.Minute
		}
		return rules, windows
	}, func() error {
		_, err := ratelimit.AllowAll(ctx, reqs, res)
		return err
	}, func(j int, n int64) (ratelimit.Result, bool) {
		r, err := f.store.AllowN(ctx, reqs[j].Key, n)
		if err == nil && r.Allowed {
			spent += n
		}
		return r, err == nil && r.Allowed
	})
	if err != nil {
		t.Fatal(err)
	}
	return spent
}

func count(t *testing.T, allow func(*testing.T, string, int64) bool, key string, tries int) int {
	n := 0
	for range tries {
		if allow(t, key, 1) {
			n++
		}
	}
	return n
}

// TestOutageInAWindow: 70 admitted by the store, then the store is gone:
// in process, the 30 it had left; back, the store counts them, and the
// window's total is the limit.
func TestOutageInAWindow(t *testing.T) {
	f := newFixture(t, 1)
	if got := count(t, f.storeAllow, "k", 70); got != 70 {
		t.Fatalf("the store admitted %d of 70", got)
	}
	f.clk.Advance(10 * time.Second)
	if got := count(t, f.localAllow, "k", 50); got != 30 {
		t.Fatalf("in process: %d admitted, want the 30 the store had left", got)
	}
	f.clk.Advance(10 * time.Second)
	if got := count(t, f.storeAllow, "k", 50); got != 0 {
		t.Fatalf("the store back in the same window admitted %d, want 0 (the limit was reached)", got)
	}
	// The next window is the store's, whole: the debt ended with its window.
	f.clk.Set(t0.Add(time.Minute))
	if got := count(t, f.storeAllow, "k", 150); got != 100 {
		t.Fatalf("the next window: %d admitted, want 100", got)
	}
}

// TestDebtPaid: admissions in process are counted by the store when it is
// back: 20 in process, then the store admits 80 more in the window.
func TestDebtPaid(t *testing.T) {
	f := newFixture(t, 1)
	if got := count(t, f.localAllow, "k", 20); got != 20 {
		t.Fatalf("in process: %d of 20", got)
	}
	if !f.l.Owed() {
		t.Fatal("20 admissions in process, nothing owed")
	}
	if got := count(t, f.storeAllow, "k", 100); got != 80 {
		t.Fatalf("the store admitted %d after 20 in process, want 80", got)
	}
	if f.l.Owed() {
		t.Fatal("the debt was counted by the store, and is still owed")
	}
}

// TestDebtNeverFits: the whole limit admitted in process while the store
// counted none; back, the store refuses the next request with its debt as
// never admissible (101 > 100), and Call spends the 100 the window has left
// for the debt. The refusal says what the spending left, and that the
// request itself is admissible once the window is over.
func TestDebtNeverFits(t *testing.T) {
	f := newFixture(t, 1)
	if got := count(t, f.localAllow, "k", 100); got != 100 {
		t.Fatalf("in process: %d of 100", got)
	}
	f.clk.Advance(10 * time.Second)
	reqs := []ratelimit.Request{{Limiter: f.store, Key: "k", N: 1}}
	res := make([]ratelimit.Result, 1)
	spent := f.call(t, reqs, res)
	if r := res[0]; r.Allowed || r.Remaining != 0 || r.ResetAfter != 50*time.Second || r.RetryAfter != 50*time.Second {
		t.Fatalf("with a debt of 100: %+v, want refused, nothing remaining, a RetryAfter and ResetAfter of 50s (the window's end)", r)
	}
	if spent != 100 || f.l.Owed() {
		t.Fatalf("spent %d of the debt (owed still: %v), want 100 and nothing owed", spent, f.l.Owed())
	}
	if reqs[0].N != 1 {
		t.Fatalf("the request's cost after Call: %d, want 1", reqs[0].N)
	}
	f.clk.Set(t0.Add(time.Minute))
	if got := count(t, f.storeAllow, "k", 150); got != 100 {
		t.Fatalf("the next window: %d admitted, want 100", got)
	}
}

// TestShares: with 4 servers, each has a quarter of a fresh limit and a
// quarter of what the store had left.
func TestShares(t *testing.T) {
	f := newFixture(t, 4)
	if got := count(t, f.localAllow, "fresh", 100); got != 25 {
		t.Fatalf("a fresh key: %d admitted, want 25 (100/4)", got)
	}
	if got := count(t, f.storeAllow, "seen", 60); got != 60 {
		t.Fatalf("the store admitted %d of 60", got)
	}
	if got := count(t, f.localAllow, "seen", 100); got != 10 {
		t.Fatalf("a seen key: %d admitted, want 10 (40 left / 4)", got)
	}
}

// TestSecondOutage: a key decided in process, then by the store (which
// refuses its debt), then in process again: the debt still owed counts
// against what the store had left, so the window never passes its limit.
func TestSecondOutage(t *testing.T) {
	f := newFixture(t, 1)
	count(t, f.storeAllow, "k", 60)
	if got := count(t, f.localAllow, "k", 30); got != 30 {
		t.Fatalf("first outage: %d of 30", got)
	}
	// Back: 60 + 30 owed + 20 would pass 100: refused, the debt stays.
	reqs := []ratelimit.Request{{Limiter: f.store, Key: "k", N: 20}}
	res := make([]ratelimit.Result, 1)
	added := f.l.Charge(reqs)
	if ok, err := ratelimit.AllowAll(context.Background(), reqs, res); ok || err != nil {
		t.Fatalf("the store admitted 20 with 30 owed (%v, %v)", ok, err)
	}
	f.l.Paid(reqs, res, added, true)
	if reqs[0].N != 20 || !f.l.Owed() {
		t.Fatalf("after a refusal: cost %d (want 20 again), owed %v (want true)", reqs[0].N, f.l.Owed())
	}
	f.l.Seen(reqs, res, nil, f.clk.Now())
	if got := count(t, f.localAllow, "k", 50); got != 10 {
		t.Fatalf("second outage: %d admitted, want 10 (40 left by the store, 30 owed)", got)
	}
}

// TestShare: every rule is cut, rounded down; a share of nothing denies.
func TestShare(t *testing.T) {
	for _, c := range []struct {
		in, want ratelimit.Rule
	}{
		{ratelimit.FixedWindow{Limit: 100, Window: time.Second}, ratelimit.FixedWindow{Limit: 33, Window: time.Second}},
		{ratelimit.SlidingLog{Limit: 10, Window: time.Minute}, ratelimit.SlidingLog{Limit: 3, Window: time.Minute}},
		{ratelimit.GCRA{Rate: 9, Per: time.Second, Burst: 6}, ratelimit.GCRA{Rate: 3, Per: time.Second, Burst: 2}},
		{ratelimit.GCRA{Rate: 2, Per: time.Second, Burst: 2}, ratelimit.FixedWindow{Limit: 0, Window: time.Second}},
		{ratelimit.TokenBucket{Capacity: 30, Refill: 3, Every: time.Second}, ratelimit.TokenBucket{Capacity: 10, Refill: 1, Every: time.Second}},
	} {
		if got := Share(c.in, 3); got != c.want {
			t.Errorf("Share(%#v, 3) = %#v, want %#v", c.in, got, c.want)
		}
		mem := backend.NewMemory()
		if _, err := ratelimit.New(mem, Share(c.in, 3)); err != nil {
			t.Errorf("Share(%#v, 3) is not a valid rule: %v", c.in, err)
		}
		mem.Close()
	}
}

// TestGrace: after an outage, what the store admits must also pass this
// server's share as the outage left it, until the grace period ends.
func TestGrace(t *testing.T) {
	f := newFixture(t, 1)
	count(t, f.storeAllow, "k", 60)
	if got := count(t, f.localAllow, "k", 50); got != 40 {
		t.Fatalf("outage: %d admitted in process, want 40", got)
	}
	if f.l.InGrace() {
		t.Fatal("in grace before the store answered")
	}
	f.l.Recovered()
	if !f.l.InGrace() {
		t.Fatal("not in grace after the store answered after an outage")
	}
	res := make([]ratelimit.Result, 1)
	ok, err := f.l.Check(context.Background(), []ratelimit.Request{{Limiter: f.store, Key: "k", N: 1}},
		[][]ratelimit.Rule{{f.rule}}, []time.Duration{time.Minute}, res)
	if err != nil || ok {
		t.Fatalf("grace: a request past the share passed (%v, %v)", ok, err)
	}
	// Another key, never decided here: its share afresh.
	ok, err = f.l.Check(context.Background(), []ratelimit.Request{{Limiter: f.store, Key: "other", N: 1}},
		[][]ratelimit.Rule{{f.rule}}, []time.Duration{time.Minute}, res)
	if err != nil || !ok {
		t.Fatalf("grace: a fresh key refused (%v, %v)", ok, err)
	}
	f.clk.Advance(DefaultGrace)
	if f.l.InGrace() {
		t.Fatal("still in grace after it ended")
	}
	f.l.Recovered()
	if f.l.InGrace() {
		t.Fatal("a store answer without an outage started a grace period")
	}
}

// TestGraceRefusalSpendsNothing: with 2 servers, the store admitted 60 and
// then this server 15 of its 20 in process. Back, in the grace period, the
// store admits a request of 6 with its debt (21 of its 40), which this
// server's share (5 left) refuses: the debt is paid, and nothing more is
// spent at the store for it.
func TestGraceRefusalSpendsNothing(t *testing.T) {
	f := newFixture(t, 2)
	if got := count(t, f.storeAllow, "k", 60); got != 60 {
		t.Fatalf("the store admitted %d of 60", got)
	}
	if got := count(t, f.localAllow, "k", 15); got != 15 {
		t.Fatalf("in process: %d of 15", got)
	}
	reqs := []ratelimit.Request{{Limiter: f.store, Key: "k", N: 6}}
	res := make([]ratelimit.Result, 1)
	if spent := f.call(t, reqs, res); spent != 0 || res[0].Allowed {
		t.Fatalf("in grace: %+v, %d spent for it, want refused by the share and nothing spent", res[0], spent)
	}
	if !f.l.InGrace() || f.l.Owed() {
		t.Fatalf("in grace %v, owed %v: want in grace, nothing owed", f.l.InGrace(), f.l.Owed())
	}
	// The store counted 60 + 15 + 6: 19 left.
	f.clk.Advance(DefaultGrace)
	if got := count(t, f.storeAllow, "k", 50); got != 19 {
		t.Fatalf("after the grace period the store admitted %d, want the 19 left of 100", got)
	}
}

// TestSeenOutOfOrder: an older answer of the same window, arriving after a
// newer one, does not make the key start an outage with more remaining.
func TestSeenOutOfOrder(t *testing.T) {
	f := newFixture(t, 1)
	key := "k"
	req := []ratelimit.Request{{Limiter: f.store, Key: key, N: 1}}
	now := f.clk.Now()
	// The newer answer: 10 left; then an older one of the same window: 50.
	f.l.Seen(req, []ratelimit.Result{{Allowed: true, Remaining: 10, ResetAfter: time.Minute}}, nil, now)
	f.l.Seen(req, []ratelimit.Result{{Allowed: true, Remaining: 50, ResetAfter: time.Minute - time.Millisecond}}, nil, now)
	if got := count(t, f.localAllow, key, 100); got != 10 {
		t.Fatalf("in process: %d admitted, want the 10 the newer answer left", got)
	}
	// An answer about a later reset replaces it, whatever it says; the
	// key starts again from it, less the 10 it still owes.
	f.l.Seen(req, []ratelimit.Result{{Allowed: true, Remaining: 70, ResetAfter: 2 * time.Minute}}, nil, now.Add(time.Second))
	if got := count(t, f.localAllow, key, 100); got != 60 {
		t.Fatalf("a later reset: %d admitted, want 60 (70 less the 10 owed)", got)
	}
}

// TestEachRuleRemembered: a limit of two rules, 5 a second and 20 in 10
// seconds; the store counts 18 of the 20, the last second's 5 leaving the
// short rule binding. An outage past that second starts each rule from
// what the store said of it: the long rule has 2 left (its share of them),
// not its whole share again. Remembered by the binding rule's result
// alone, the key starts afresh once the short rule's second has passed.
func TestEachRuleRemembered(t *testing.T) {
	for _, servers := range []int{1, 2} {
		t.Run(fmt.Sprint("servers=", servers), func(t *testing.T) {
			clk := clock.NewFake(t0)
			mem := backend.NewMemory(backend.WithClock(clk))
			t.Cleanup(func() { mem.Close() })
			rules := []ratelimit.Rule{
				ratelimit.FixedWindow{Limit: 5, Window: time.Second},
				ratelimit.FixedWindow{Limit: 20, Window: 10 * time.Second},
			}
			store, err := ratelimit.New(mem, rules...)
			if err != nil {
				t.Fatal(err)
			}
			l := New(Options{Servers: func() int { return servers }, Clock: clk})
			t.Cleanup(func() { l.Close() })
			ctx := context.Background()
			storeAllow := func(key string, eachRule bool) bool {
				reqs := []ratelimit.Request{{Limiter: store, Key: key, N: 1}}
				res := make([]ratelimit.Result, 1)
				var each [][]ratelimit.Result
				if eachRule {
					each = [][]ratelimit.Result{make([]ratelimit.Result, len(rules))}
				}
				err := l.Call(ctx, reqs, res, each, func() ([][]ratelimit.Rule, []time.Duration) {
					return [][]ratelimit.Rule{rules}, []time.Duration{10 * time.Second}
				}, func() (err error) {
					if each == nil {
						res[0], err = store.AllowN(ctx, key, reqs[0].N)
					} else {
						res[0], err = store.AllowNEach(ctx, key, reqs[0].N, each[0])
					}
					return err
				}, func(int, int64) (ratelimit.Result, bool) { return ratelimit.Result{}, false })
				if err != nil {
					t.Fatal(err)
				}
				return res[0].Allowed
			}
			localAllow := func(key string) ratelimit.Result {
				res := make([]ratelimit.Result, 1)
				if _, err := l.Decide(ctx, []ratelimit.Request{{Limiter: store, Key: key, N: 1}},
					[][]ratelimit.Rule{rules}, []time.Duration{10 * time.Second}, res); err != nil {
					t.Fatal(err)
				}
				return res[0]
			}
			// The clock only runs forward: Memory's time stands still for
			// the keys of a shard when a clock is set back.
			for s, n := range []int{5, 5, 3, 5} {
				clk.Set(t0.Add(time.Duration(s) * time.Second))
				for _, key := range []string{"each", "binding"} {
					for range n {
						if !storeAllow(key, key == "each") {
							t.Fatalf("%s: the store refused in second %d", key, s)
						}
					}
				}
			}
			// The outage, in the last second the store answered: its short
			// rule is spent.
			if r := localAllow("each"); r.Allowed || r.Rule != 0 || r.RetryAfter <= 0 {
				t.Fatalf("second 3 in process: %+v, want refused by rule 0", r)
			}
			// The binding rule's result alone bounds nothing past its second.
			clk.Set(t0.Add(4 * time.Second))
			binding := 0
			for range 10 {
				if localAllow("binding").Allowed {
					binding++
				}
			}
			if binding != 5/servers {
				t.Fatalf("remembered by the binding rule alone: %d admitted in second 4, want %d (the short rule's share afresh)", binding, 5/servers)
			}
			want := 2 / servers
			admitted := 0
			for s := 4; s < 10; s++ {
				clk.Set(t0.Add(time.Duration(s) * time.Second))
				for range 10 {
					r := localAllow("each")
					if r.Allowed {
						admitted++
					} else if r.Rule != 1 || r.RetryAfter <= 0 {
						t.Fatalf("second %d in process: %+v, want refused by rule 1 (its 20 in 10 s)", s, r)
					}
				}
			}
			if admitted != want {
				t.Fatalf("seconds 4 to 9 in process: %d admitted, want %d (the store's 2 left of 20, shared by %d)", admitted, want, servers)
			}
			// The next 10 s are the store's afresh: the short rule's share.
			clk.Set(t0.Add(10 * time.Second))
			admitted = 0
			for range 10 {
				if localAllow("each").Allowed {
					admitted++
				}
			}
			if admitted != 5/servers {
				t.Fatalf("second 10 in process: %d admitted, want %d", admitted, 5/servers)
			}
		})
	}
}

// TestSeenLateAnswer: a call sent 3 s before its window ends is decided by
// the store 2 s later (a busy machine), with nothing left. In the window's
// last second the degraded mode must still know the window is spent, not
// start the key afresh beside the store's 100.
func TestSeenLateAnswer(t *testing.T) {
	f := newFixture(t, 1)
	f.clk.Set(t0.Add(time.Minute - 3*time.Second))
	if got := count(t, f.storeAllow, "k", 100); got != 100 {
		t.Fatalf("the store admitted %d of 100", got)
	}
	start := f.clk.Now()
	f.clk.Advance(2 * time.Second) // the call waits before the store decides it
	reqs := []ratelimit.Request{{Limiter: f.store, Key: "k", N: 1}}
	res := make([]ratelimit.Result, 1)
	if _, err := ratelimit.AllowAll(context.Background(), reqs, res); err != nil {
		t.Fatal(err)
	}
	f.l.Seen(reqs, res, nil, start)
	f.clk.Advance(500 * time.Millisecond) // the window's last half second
	if got := count(t, f.localAllow, "k", 50); got != 0 {
		t.Fatalf("in process, in the spent window's last half second: %d admitted, want 0", got)
	}
}
