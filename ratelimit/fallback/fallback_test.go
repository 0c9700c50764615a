package fallback_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/ratelimit/fallback"
)

var t0 = time.Unix(1_800_000_000, 0) // a whole minute

// count calls f.Allow tries times for key and returns how many were
// admitted, failing the test on an error or on an answer whose Fallback is
// not fb.
func count(t *testing.T, f *fallback.Limiter, key string, tries int, fb bool) int {
	t.Helper()
	n := 0
	for range tries {
		res, err := f.Allow(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if res.Fallback != fb {
			t.Fatalf("Result.Fallback = %v, want %v (%+v)", res.Fallback, fb, res)
		}
		if res.Allowed {
			n++
		}
	}
	return n
}

// TestDegradedMultiRule: a Limiter of two rules, 10 a second and 40 a
// minute, on a Redis (AOF, so that a crash loses nothing it acknowledged)
// on a fake clock, shared by 2 processes. Redis killed: each rule is cut to
// its half, the key starts from what the store last said; back, the store
// counts what was admitted without it (and, in the grace period, what the
// share refused), and the minute never passes 40.
func TestDegradedMultiRule(t *testing.T) {
	// rueidis only: the remembered answers expire in real time (their
	// window and 2 s) while this test's windows are on a fake clock, and
	// go-redis's calls to a killed Redis take a few 100 ms each.
	for _, c := range []client{clients[1]} {
		t.Run(c.name, func(t *testing.T) {
			r := testenv.NewRedis(t, testenv.WithAOF())
			clk := clock.NewFake(t0)
			b := c.make(t, r, clk)
			lim, err := ratelimit.New(b,
				ratelimit.Named("persec", ratelimit.FixedWindow{Limit: 10, Window: time.Second}),
				ratelimit.Named("permin", ratelimit.FixedWindow{Limit: 40, Window: time.Minute}))
			if err != nil {
				t.Fatal(err)
			}
			var fellBack int
			f, err := fallback.New(lim, fallback.Options{
				Mode:       fallback.Degraded,
				Servers:    func() int { return 2 },
				Timeout:    5 * time.Second,
				OnFallback: func(string, error) { fellBack++ },
			})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()

			if got := count(t, f, "k", 6, false); got != 6 {
				t.Fatalf("the store admitted %d of 6", got)
			}
			if err := r.Kill(); err != nil {
				t.Fatal(err)
			}
			// Second 0: the store had 4 left of persec; the half of it.
			if got := count(t, f, "k", 10, true); got != 2 {
				t.Fatalf("second 0 in process: %d admitted, want 2 (4 left / 2)", got)
			}
			if fellBack != 10 {
				t.Fatalf("OnFallback called %d times for 10 fallback answers", fellBack)
			}
			// Second 1: persec's half afresh (5); permin's half is 20.
			clk.Advance(time.Second)
			res, err := f.Allow(context.Background(), "k")
			if err != nil || !res.Allowed || !res.Fallback || res.RuleName != "persec" || res.Limit != 5 {
				t.Fatalf("second 1: %+v, %v; want admitted by the fallback on persec's share (5)", res, err)
			}
			if got := count(t, f, "k", 10, true); got != 4 {
				t.Fatalf("second 1 in process: %d more admitted, want 4", got)
			}
			// Seconds 2 to 4: 5 each, until permin's share of what the store
			// had left of it (34 / 2) is spent: 2+5+5+5 = 17.
			admitted := 2 + 5
			for s := 2; s <= 4; s++ {
				clk.Advance(time.Second)
				admitted += count(t, f, "k", 10, true)
			}
			if admitted != 17 {
				t.Fatalf("in process over 5 s: %d admitted, want 17 (permin's share of the 34 the store had left)", admitted)
			}
			clk.Advance(time.Second)
			if got := count(t, f, "k", 10, true); got != 0 {
				t.Fatalf("second 5: %d admitted past permin's share", got)
			}
			// Back: the first call carries the debt of 17, which does not
			// fit in persec's 10: refused, it spends persec's 10 of it; the
			// next second's first call carries the 7 left. The store counts
			// every admission: the minute admits 40 in all.
			if err := r.Restart(); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Second)
			res, err = f.Allow(context.Background(), "k")
			if err != nil || res.Fallback || res.Allowed {
				t.Fatalf("the store back: %+v, %v; want its refusal (the debt does not fit in persec)", res, err)
			}
			// For the grace period after the outage (3 s of the fake
			// clock) what the store admits must also pass this process's
			// share, which the outage spent: those the store counted and the
			// share refused are lost to the minute, never added to it.
			total := 6 + 17
			for s := 0; s < 8; s++ {
				clk.Advance(time.Second)
				total += count(t, f, "k", 20, false)
			}
			if total > 40 {
				t.Fatalf("the minute admitted %d in all, over 40", total)
			}
			res, err = f.Allow(context.Background(), "k")
			if err != nil || res.Fallback || res.Allowed || res.RuleName != "permin" {
				t.Fatalf("after %d admitted: %+v, %v; want the store's refusal on permin (it counted the minute's 40)", total, res, err)
			}
			t.Logf("the minute: %d admitted, the store counted 40", total)
		})
	}
}

// TestDegradedLongRuleRemembered reproduces the over-admission of a
// fallback that remembered only the binding rule of the store's answers:
// rules of 5 a second and 20 in 10 seconds on Redis (a fake clock), 18 of
// the 20 admitted by the store, the last second's 5 leaving the short rule
// binding. Redis killed and the short rule's second past, the process may
// admit the 2 the store had left of the long rule until its 10 seconds
// end, not the short rule's whole share each second.
func TestDegradedLongRuleRemembered(t *testing.T) {
	// rueidis: its calls to a killed Redis fail at once (see
	// TestDegradedMultiRule).
	r := testenv.NewRedis(t)
	clk := clock.NewFake(t0)
	lim, err := ratelimit.New(clients[1].make(t, r, clk),
		ratelimit.Named("short", ratelimit.FixedWindow{Limit: 5, Window: time.Second}),
		ratelimit.Named("long", ratelimit.FixedWindow{Limit: 20, Window: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	f, err := fallback.New(lim, fallback.Options{Mode: fallback.Degraded, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for s, n := range []int{5, 5, 3, 5} {
		clk.Set(t0.Add(time.Duration(s) * time.Second))
		if got := count(t, f, "k", n, false); got != n {
			t.Fatalf("second %d: the store admitted %d of %d", s, got, n)
		}
	}
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for s := 4; s < 10; s++ {
		clk.Set(t0.Add(time.Duration(s) * time.Second))
		admitted += count(t, f, "k", 10, true)
	}
	if admitted != 2 {
		t.Fatalf("seconds 4 to 9 in process: %d admitted, want 2 (the store had counted 18 of the long rule's 20)", admitted)
	}
	res, err := f.Allow(context.Background(), "k")
	if err != nil || res.Allowed || !res.Fallback || res.RuleName != "long" || res.RetryAfter <= 0 {
		t.Fatalf("past the long rule: %+v, %v; want the fallback's refusal on it", res, err)
	}
}

// TestModes: a killed store, and every mode's answer; the caller's own
// cancellation and invalid calls are errors in every mode.
func TestModes(t *testing.T) {
	r := testenv.NewRedis(t)
	b := goRedis(t, r, nil)
	lim, err := ratelimit.New(b, ratelimit.FixedWindow{Limit: 5, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	modes := []fallback.Mode{fallback.Error, fallback.Degraded, fallback.Allow, fallback.Deny}
	fs := map[fallback.Mode]*fallback.Limiter{}
	for _, m := range modes {
		f, err := fallback.New(lim, fallback.Options{Mode: m, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		fs[m] = f
		defer f.Close()
		// The store decides while it is up, in every mode.
		if res, err := fs[m].Allow(context.Background(), "up-"+m.String()); err != nil || res.Fallback || !res.Allowed {
			t.Fatalf("%v, the store up: %+v, %v", m, res, err)
		}
	}
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, m := range modes {
		f := fs[m]
		res, err := f.Allow(context.Background(), "k")
		switch m {
		case fallback.Error:
			if err == nil {
				t.Errorf("Error: %+v, want the store's error", res)
			}
		case fallback.Degraded:
			if err != nil || !res.Fallback || !res.Allowed || res.Remaining != 4 || res.ResetAfter <= 0 {
				t.Errorf("Degraded: %+v, %v; want admitted in process, 4 left", res, err)
			}
		case fallback.Allow:
			if err != nil || !res.Fallback || !res.Allowed {
				t.Errorf("Allow: %+v, %v; want admitted", res, err)
			}
		case fallback.Deny:
			if err != nil || !res.Fallback || res.Allowed || res.RetryAfter <= 0 {
				t.Errorf("Deny: %+v, %v; want refused with a RetryAfter", res, err)
			}
		}
		if _, err := f.Allow(cancelled, "k"); !errors.Is(err, context.Canceled) {
			t.Errorf("%v, the caller's context cancelled: %v, want context.Canceled", m, err)
		}
		if _, err := f.Allow(context.Background(), ""); !errors.Is(err, backend.ErrEmptyKey) {
			t.Errorf("%v, the empty key: %v, want backend.ErrEmptyKey", m, err)
		}
		if _, err := f.AllowN(context.Background(), "k", -1); !errors.Is(err, ratelimit.ErrNegativeN) {
			t.Errorf("%v, n = -1: %v, want ratelimit.ErrNegativeN", m, err)
		}
	}
}

// TestCallerDeadline: a paused store and a caller whose own deadline ends
// first get the context's error, not a fallback answer.
func TestCallerDeadline(t *testing.T) {
	r := testenv.NewRedis(t)
	f := newStallLimiter(t, goRedis(t, r, nil), fallback.Options{Mode: fallback.Degraded, Timeout: time.Minute})
	if _, err := f.Allow(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	defer r.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := f.Allow(ctx, "k")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the caller's deadline passed: %+v, %v; want context.DeadlineExceeded", res, err)
	}
}

// TestNewErrors: a nil Limiter and an unknown mode are refused with an
// error that names them.
func TestNewErrors(t *testing.T) {
	if _, err := fallback.New(nil, fallback.Options{}); err == nil || !strings.Contains(err.Error(), "nil") {
		t.Errorf("New(nil): %v, want an error naming the nil Limiter", err)
	}
	lim, err := ratelimit.New(backend.NewMemory(), ratelimit.FixedWindow{Limit: 1, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fallback.New(lim, fallback.Options{Mode: fallback.Mode(42)}); err == nil || !strings.Contains(err.Error(), "Mode 42") {
		t.Errorf("New with Mode 42: %v, want an error naming it", err)
	}
}
