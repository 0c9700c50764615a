package ratelimit_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// TestReplayedDecisionOnlyDenies is issue 13's rule for rate limits: a
// decision that a client resends after a lost reply is decided again (the
// limiter does not keep a record per decision, which would double its cost),
// so it may spend twice — and that can only deny more, never admit more than
// the rule allows. The same arrivals, at the same fake times, go to a memory
// limiter and to one on a Redis where every script call runs twice: at every
// step the replayed limiter has admitted no more than the memory one, and
// the replays did cost admissions.
func TestReplayedDecisionOnlyDenies(t *testing.T) {
	rules := []ratelimit.Rule{
		ratelimit.FixedWindow{Limit: 10, Window: time.Second},
		ratelimit.SlidingWindow{Limit: 10, Window: time.Second},
		ratelimit.SlidingLog{Limit: 10, Window: time.Second},
		ratelimit.TokenBucket{Capacity: 10, Refill: 10, Every: time.Second},
		ratelimit.LeakyBucket{Rate: 10, Per: time.Second, Burst: 5},
		ratelimit.GCRA{Rate: 10, Per: time.Second, Burst: 10},
	}
	ctx := context.Background()
	for _, rule := range rules {
		clk := clock.NewFake(t0)
		mem := backend.NewMemory(backend.WithClock(clk))
		t.Cleanup(func() { mem.Close() })
		rb, rp := backendtest.Replaying(t, clk)
		exact, err := ratelimit.New(mem, rule, ratelimit.GCRA{Rate: 1000, Per: time.Second, Burst: 1000})
		if err != nil {
			t.Fatal(err)
		}
		replayed, err := ratelimit.New(rb, rule, ratelimit.GCRA{Rate: 1000, Per: time.Second, Burst: 1000})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		var nExact, nReplayed int
		for i := range 300 {
			clk.Advance(time.Duration(rng.IntN(40)) * time.Millisecond)
			n := int64(1 + rng.IntN(2))
			a, err := exact.AllowN(ctx, "k", n)
			if err != nil {
				t.Fatal(err)
			}
			b, err := replayed.AllowN(ctx, "k", n)
			if err != nil {
				t.Fatal(err)
			}
			if a.Allowed {
				nExact++
			}
			if b.Allowed {
				nReplayed++
			}
			if nReplayed > nExact {
				t.Fatalf("%T: after %d calls the replayed limiter admitted %d, more than the exact %d", rule, i+1, nReplayed, nExact)
			}
		}
		if rp.Replays() < 300 || nReplayed >= nExact {
			t.Fatalf("%T: %d replays, admitted %d replayed vs %d exact: the replays cost nothing?", rule, rp.Replays(), nReplayed, nExact)
		}
		t.Logf("%T: admitted %d of 300 with every call replayed, %d exactly", rule, nReplayed, nExact)
	}
}
