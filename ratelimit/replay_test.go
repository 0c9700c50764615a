package ratelimit_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
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

// TestLostReplyThroughProxy: the same through a real lost reply (the proxy
// drops it and closes the connection; go-redis resends). A resent decision
// spends again and is answered from the second run, so the caller is denied
// sooner, never admitted more; a resent Acquire holds one slot.
func TestLostReplyThroughProxy(t *testing.T) {
	p := testenv.NewProxy(t, testenv.SharedRedis(t).Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: 2, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	b := backendtest.NewRedis(t, rdb, backend.WithPrefix(backendtest.UniquePrefix()))
	ctx := context.Background()

	lim, err := ratelimit.New(b, ratelimit.FixedWindow{Limit: 3, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Allow(ctx, "warm-up"); err != nil { // the script cached: the lost reply is the decision's, not a NOSCRIPT
		t.Fatal(err)
	}
	p.LoseNextReplies(1)
	r, err := lim.Allow(ctx, "k")
	if err != nil || !r.Allowed || r.Remaining != 1 {
		t.Fatalf("decision whose reply was lost and resent: %+v %v; want allowed with 1 left (spent twice)", r, err)
	}
	admitted := 1
	for range 3 {
		if r, err := lim.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		} else if r.Allowed {
			admitted++
		}
	}
	if admitted != 2 || p.Lost() != 1 {
		t.Fatalf("admitted %d of a limit of 3 after one resent decision (lost %d), want 2", admitted, p.Lost())
	}

	cl, err := ratelimit.NewConcurrency(b, ratelimit.Concurrency{Limit: 2, Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.Acquire(ctx, "warm-up"); err != nil {
		t.Fatal(err)
	}
	p.LoseNextReplies(1)
	release, r, err := cl.Acquire(ctx, "conn")
	if err != nil || !r.Allowed || r.Remaining != 1 {
		t.Fatalf("Acquire whose reply was lost and resent: %+v %v; want allowed with 1 slot left", r, err)
	}
	if _, r, err := cl.Acquire(ctx, "conn"); err != nil || !r.Allowed || r.Remaining != 0 {
		t.Fatalf("second Acquire: %+v %v; want the second slot", r, err)
	}
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, r, err := cl.Acquire(ctx, "conn"); err != nil || !r.Allowed {
		t.Fatalf("Acquire after a release: %+v %v; want the freed slot", r, err)
	}
}
