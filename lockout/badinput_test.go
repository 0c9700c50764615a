package lockout_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/lockout"
)

func TestBadPolicy(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	ok := lockout.Policy{MaxFailures: 5, Window: time.Minute, BanFor: time.Minute}
	with := func(f func(*lockout.Policy)) lockout.Policy { p := ok; f(&p); return p }
	cases := []struct {
		p    lockout.Policy
		want string
	}{
		{lockout.Policy{}, "lockout: Policy.MaxFailures must be between 1 and 10000, got 0"},
		{with(func(p *lockout.Policy) { p.MaxFailures = -3 }), "lockout: Policy.MaxFailures must be between 1 and 10000, got -3"},
		{with(func(p *lockout.Policy) { p.MaxFailures = 10001 }), "lockout: Policy.MaxFailures must be between 1 and 10000, got 10001"},
		{with(func(p *lockout.Policy) { p.Window = 0 }), "lockout: Policy.Window must be > 0, got 0s"},
		{with(func(p *lockout.Policy) { p.Window = -time.Second }), "lockout: Policy.Window must be > 0, got -1s"},
		{with(func(p *lockout.Policy) { p.Window = 1500 * time.Nanosecond }), "lockout: Policy.Window must be a whole number of microseconds, got 1.5µs"},
		{with(func(p *lockout.Policy) { p.Window = 87601 * time.Hour }), "lockout: Policy.Window must be at most MaxPeriod (87600h), got 87601h0m0s"},
		{with(func(p *lockout.Policy) { p.BanFor = 0 }), "lockout: Policy.BanFor must be > 0, got 0s"},
		{with(func(p *lockout.Policy) { p.BanFor = -time.Minute }), "lockout: Policy.BanFor must be > 0, got -1m0s"},
		{with(func(p *lockout.Policy) { p.BanFor = time.Nanosecond }), "lockout: Policy.BanFor must be a whole number of microseconds, got 1ns"},
		{with(func(p *lockout.Policy) { p.BanFor = 87601 * time.Hour }), "lockout: Policy.BanFor must be at most MaxPeriod"},
	}
	for _, c := range cases {
		_, err := lockout.New(m, c.p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): %v\nwant an error containing %q", c.p, err, c.want)
		}
		if err2 := c.p.Validate(); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("Validate(%+v) = %v, New said %v", c.p, err2, err)
		}
	}
	if _, err := lockout.New(nil, ok); err == nil || !strings.Contains(err.Error(), "backend is nil") {
		t.Errorf("nil backend: %v", err)
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid policy: %v", err)
	}
}

func TestBadCalls(t *testing.T) {
	ctx := context.Background()
	for _, bk := range allBackends()[:2] {
		t.Run(bk.Name, func(t *testing.T) {
			g, err := lockout.New(bk.Make(t, nil), lockout.Policy{MaxFailures: 1, Window: time.Minute, BanFor: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			// The empty key is refused; a long one is a key like any other
			// (TestLongKeys).
			want := backend.ErrEmptyKey
			if _, err := g.Check(ctx, ""); !errors.Is(err, want) {
				t.Errorf("Check(\"\"): %v, want %v", err, want)
			}
			if _, err := g.Fail(ctx, ""); !errors.Is(err, want) {
				t.Errorf("Fail(\"\"): %v, want %v", err, want)
			}
			if err := g.Succeed(ctx, ""); !errors.Is(err, want) {
				t.Errorf("Succeed(\"\"): %v, want %v", err, want)
			}
			if err := g.Reset(ctx, ""); !errors.Is(err, want) {
				t.Errorf("Reset(\"\"): %v, want %v", err, want)
			}
			if st, err := g.Fail(ctx, strings.Repeat("k", backend.MaxKeyLen+1)); err != nil || !st.Banned {
				t.Errorf("Fail of a key of MaxKeyLen+1 bytes: %+v, %v; want a ban", st, err)
			}
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := g.Fail(cancelled, "k"); !errors.Is(err, context.Canceled) {
				t.Errorf("Fail with a cancelled context: %v", err)
			}
			if st, err := g.Check(ctx, "k"); err != nil || st.Banned {
				t.Errorf("a rejected Fail banned the key: %+v, %v", st, err)
			}
		})
	}
}
