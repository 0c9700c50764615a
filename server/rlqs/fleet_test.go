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
// backend. A limit of 1000/s (10^6 thousandths), grants lasting 2 s.
func TestQuotaShareSteps(t *testing.T) {
	const limit, ttl = 1_000_000, 2_000_000
	type step struct {
		at     time.Duration
		member string
		demand int64
		want   quotaGrant
		limit  int64 // 0: limit
		first  bool
	}
	steps := []step{
		// Alone: the whole budget (the limit less the 3% reserve).
		{0, "a", 500_000, quotaGrant{970_000, 1, 500_000}, 0, false},
		// A newcomer: its share would be half, but a's grant leaves only the
		// reserve, of which it takes half (leaving half to the next newcomer).
		{0, "b", 500_000, quotaGrant{15_000, 2, 1_000_000}, 0, false},
		// a shrinks to its half, then b grows to it.
		{time.Second, "a", 500_000, quotaGrant{485_000, 2, 1_000_000}, 0, false},
		{time.Second, "b", 500_000, quotaGrant{485_000, 2, 1_000_000}, 0, false},
		// Demand 3:1: a's share (the even floor, 5% of the budget halved, plus
		// three quarters of the rest) is capped by what b still holds, and a
		// keeps what it has ...
		{2 * time.Second, "a", 1_500_000, quotaGrant{485_000, 2, 2_000_000}, 0, false},
		{2 * time.Second, "b", 500_000, quotaGrant{24_250 + 230_375, 2, 2_000_000}, 0, false},
		// ... until b has shrunk.
		{3 * time.Second, "a", 1_500_000, quotaGrant{24_250 + 691_125, 2, 2_000_000}, 0, false},
		// A member that reports no demand still gets the floor.
		{3500 * time.Millisecond, "c", 0, quotaGrant{16_166, 3, 2_000_000}, 0, false},
		// b's grant expired at 4 s, a's at 5 s: b comes back beside c alone ...
		{5100 * time.Millisecond, "b", 500_000, quotaGrant{24_250 + 921_500, 2, 500_000}, 0, false},
		// ... and once c's expired too (5.5 s), takes the whole budget.
		{5600 * time.Millisecond, "b", 500_000, quotaGrant{970_000, 1, 500_000}, 0, false},
		// A crowd of newcomers: each takes half of what is free, so each gets something.
		{5600 * time.Millisecond, "d", 500_000, quotaGrant{15_000, 2, 1_000_000}, 0, false},
		{5600 * time.Millisecond, "e", 500_000, quotaGrant{7_500, 3, 1_500_000}, 0, false},
		{5600 * time.Millisecond, "f", 500_000, quotaGrant{3_750, 4, 2_000_000}, 0, false},
		// A first report (Envoy's, at the bucket's first request: one request
		// in no time) is taken to want the others' average.
		{5600 * time.Millisecond, "h", 1_000, quotaGrant{1_875, 5, 2_500_000}, 0, true},
		// A reload halves the limit: the live grants already exceed it, so a
		// capped member gets nothing until they shrink, even the one that had some.
		{5600 * time.Millisecond, "g", 500_000, quotaGrant{0, 6, 3_000_000}, 500_000, false},
		{5600 * time.Millisecond, "f", 500_000, quotaGrant{0, 6, 3_000_000}, 500_000, false},
		// b, reporting under the new limit, shrinks to its sixth of its budget.
		{5600 * time.Millisecond, "b", 500_000, quotaGrant{4_041 + 76_791, 6, 3_000_000}, 500_000, false},
	}
	for _, k := range quotaBackends() {
		t.Run(k.Name, func(t *testing.T) {
			clk := clock.NewFake(time.Unix(1_800_000_000, 0))
			start := clk.Now()
			b := k.Make(t, clk)
			for i, s := range steps {
				clk.Set(start.Add(s.at))
				lim := int64(limit)
				if s.limit != 0 {
					lim = s.limit
				}
				got, err := quotaShare(context.Background(), b, "d|k_v", s.member, s.demand, lim, ttl, s.first, defaultQuotaPolicy)
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
				g, err := quotaShare(context.Background(), b, "d|k_v", r.member, r.demand, limit, ttl, r.demand%3 == 0, defaultQuotaPolicy)
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
