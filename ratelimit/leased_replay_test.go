package ratelimit_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// resendGiveBacks runs every give-back script call twice, as a client's
// resend after a lost reply does, and everything else once.
type resendGiveBacks struct {
	backend.Scripter
	resent atomic.Int64
}

func (r *resendGiveBacks) EvalSha(ctx context.Context, sha string, keys, args []string) (any, error) {
	if len(args) > 1 && strings.HasPrefix(args[1], "u") {
		if _, err := r.Scripter.EvalSha(ctx, sha, keys, args); err != nil {
			return nil, err
		}
		r.resent.Add(1)
	}
	return r.Scripter.EvalSha(ctx, sha, keys, args)
}

func (r *resendGiveBacks) Eval(ctx context.Context, src string, keys, args []string) (any, error) {
	if len(args) > 1 && strings.HasPrefix(args[1], "u") {
		if _, err := r.Scripter.Eval(ctx, src, keys, args); err != nil {
			return nil, err
		}
		r.resent.Add(1)
	}
	return r.Scripter.Eval(ctx, src, keys, args)
}

// TestLeasedGiveBackResent: a give-back that runs twice gives back once. Had
// it given back twice, the units of another process's decisions would be
// freed: over-admission.
func TestLeasedGiveBackResent(t *testing.T) {
	for _, c := range []struct {
		rule   ratelimit.Rule
		others int64 // units another process takes before the give-back
		want   int64 // left after the give-back
	}{
		// 6 admitted: 4 left when the give-back counts once.
		{ratelimit.FixedWindow{Limit: 10, Window: time.Minute}, 5, 4},
		{ratelimit.SlidingWindow{Limit: 10, Window: time.Minute}, 5, 4},
		// GCRA refuses it (another decision came after the lease), and the
		// lease's pad of 1µs takes part of a unit: 0 left.
		{ratelimit.GCRA{Rate: 1, Per: time.Minute, Burst: 10}, 5, 0},
		// Alone, the give-back applies once (1 admitted, the pad's part of a
		// unit: 8 left); twice, it would have emptied the bucket (10 left).
		{ratelimit.GCRA{Rate: 1, Per: time.Minute, Burst: 10}, 0, 8},
	} {
		rule := c.rule
		ctx := context.Background()
		clk := clock.NewFake(t0)
		plain := newRedis(t, clk)
		plains := unwrap.Redis(plain)
		rs := &resendGiveBacks{Scripter: plains.Scripter()}
		resending, err := backend.NewRedisScripter(rs, backend.WithPrefix(plains.Prefix()), backend.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		limA, err := ratelimit.New(resending, rule)
		if err != nil {
			t.Fatal(err)
		}
		a, err := ratelimit.NewLeased(limA, ratelimit.LeaseSize(4, 4), ratelimit.LeaseFraction(1), ratelimit.LeaseTarget(time.Microsecond))
		if err != nil {
			t.Fatal(err)
		}
		b, err := ratelimit.New(plain, rule)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := a.Allow(ctx, "k"); err != nil || !r.Allowed { // a lease of 4, 1 used
			t.Fatalf("%T: %+v %v", rule, r, err)
		}
		if r, err := b.AllowN(ctx, "k", c.others); err != nil || !r.Allowed {
			t.Fatalf("%T: %+v %v", rule, r, err)
		}
		if err := a.Release(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if rs.resent.Load() != 1 {
			t.Fatalf("%T: %d give-backs resent, want 1", rule, rs.resent.Load())
		}
		peek, err := b.AllowN(ctx, "k", 0)
		if err != nil {
			t.Fatal(err)
		}
		want := c.want
		if peek.Remaining != want {
			t.Errorf("%T: %d left after a resent give-back, want %d", rule, peek.Remaining, want)
		}
	}
}
