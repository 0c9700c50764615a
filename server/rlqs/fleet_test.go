package rlqs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
)

// quotaBackends are the backends fleet shares must agree on: memory, Redis
// through go-redis and rueidis, and a Redis Cluster.
func quotaBackends() []backendtest.Kind { return backendtest.All() }

// TestQuotaShareSteps: shares at fixed fake times, the same on every
// backend. A limit of 1000/s (10^6 thousandths): the reserve is 3000 (0.3%),
// the budget 997,000 and its even part 49,850; grants last 2 s; the unit is
// a second.
func TestQuotaShareSteps(t *testing.T) {
	const limit, ttl, unit = 1_000_000, 2_000_000, 1_000_000
	type step struct {
		at     time.Duration
		member string
		demand int64
		want   quotaGrant
		first  bool
	}
	steps := []step{
		// Alone: the whole budget, a burst of ⌈997/11⌉ = 91 and a fill of 906.
		{0, "a", 500_000, quotaGrant{997_000, 1, 500_000, 91_000}, false},
		// A newcomer: a's new bucket holds all but the reserve for a second;
		// b takes half of what is free but half the reserve: (3 − 1.5)/2, a
		// share under two a second, with no burst of its own.
		{0, "b", 500_000, quotaGrant{750, 2, 1_000_000, 0}, false},
		// a shrinks to its target: half the budget, 498.5, in whole requests
		// (498 each, and the one left over to the first name), 499. Its new
		// bucket, full, costs its burst for a second on top of the old one
		// (91 + 906): only 2.25 is free, so it takes a burst of two tokens
		// for now.
		{time.Second, "a", 500_000, quotaGrant{499_000, 2, 1_000_000, 2_000}, false},
		// b cannot grow: a's change holds the room, and a still misses 44 of
		// its burst. It keeps what it has.
		{time.Second, "b", 500_000, quotaGrant{750, 2, 1_000_000, 0}, false},
		// A second later a's change is past: a restores its burst (46) ...
		{2 * time.Second, "a", 500_000, quotaGrant{499_000, 2, 1_000_000, 46_000}, false},
		// ... which holds 2 + 46 + 497 for a second, and b grows into what
		// is left but the reserve: 1000 − 545 − 3 = 452, a burst of
		// ⌈452/11⌉ = 42.
		{2 * time.Second, "b", 500_000, quotaGrant{452_000, 2, 1_000_000, 42_000}, false},
		// a is at its target and keeps it; b grows again by what its old
		// burst leaves: 1000 − 499 − 3 − 42.
		{3 * time.Second, "a", 500_000, quotaGrant{499_000, 2, 1_000_000, 46_000}, false},
		{4 * time.Second, "b", 500_000, quotaGrant{456_000, 2, 1_000_000, 42_000}, false},
		// A first report (Envoy's, at the bucket's first request: one request
		// in no time) is taken to want the others' average. a and b commit
		// all but the reserve (b's change holds both its bursts): the
		// newcomer takes (3 − 1.5)/2.
		{4 * time.Second, "c", 1_000, quotaGrant{750, 3, 1_500_000, 0}, true},
	}
	for _, k := range quotaBackends() {
		t.Run(k.Name, func(t *testing.T) {
			clk := clock.NewFake(time.Unix(1_800_000_000, 0))
			start := clk.Now()
			b := k.Make(t, clk)
			for i, s := range steps {
				clk.Set(start.Add(s.at))
				got, err := quotaShare(context.Background(), b, "d|k_v", s.member, s.demand, limit, ttl, unit, s.first, defaultQuotaPolicy)
				if err != nil {
					t.Fatal(err)
				}
				if got != s.want {
					t.Errorf("step %d (%v, %s, demand %d): got %+v, want %+v", i, s.at, s.member, s.demand, got, s.want)
				}
			}
		})
	}
}

// TestQuotaShareNeverOverLimit: under random reports of random demands from
// a changing fleet, the live grants never add up to more than the limit, and
// every backend hands out the same grants.
func TestQuotaShareNeverOverLimit(t *testing.T) {
	const limit, ttl = 1_000_000, 2_000_000
	type rep struct {
		at     time.Duration
		member string
		demand int64
	}
	rng := rand.New(rand.NewPCG(7, 11))
	var reps []rep
	at := time.Duration(0)
	for range 400 {
		at += time.Duration(rng.IntN(300)) * time.Millisecond
		reps = append(reps, rep{at, fmt.Sprintf("m%d", rng.IntN(10)), rng.Int64N(3_000_000)})
	}
	var first []int64
	for _, k := range quotaBackends() {
		t.Run(k.Name, func(t *testing.T) {
			clk := clock.NewFake(time.Unix(1_800_000_000, 0))
			start := clk.Now()
			b := k.Make(t, clk)
			type held struct{ grant, expires int64 }
			live := map[string]held{}
			var grants []int64
			for i, r := range reps {
				clk.Set(start.Add(r.at))
				g, err := quotaShare(context.Background(), b, "d|k_v", r.member, r.demand, limit, ttl, 1_000_000, r.demand%3 == 0, defaultQuotaPolicy)
				if err != nil {
					t.Fatal(err)
				}
				now := r.at.Microseconds()
				live[r.member] = held{g.grant, now + ttl}
				sum := int64(0)
				for _, h := range live {
					if h.expires > now {
						sum += h.grant
					}
				}
				if sum > limit {
					t.Fatalf("report %d: live grants add up to %d, over the limit %d", i, sum, limit)
				}
				grants = append(grants, g.grant)
			}
			if first == nil {
				first = grants
				return
			}
			for i := range grants {
				if grants[i] != first[i] {
					t.Fatalf("report %d: grant %d, the first backend's was %d", i, grants[i], first[i])
				}
			}
		})
	}
}
