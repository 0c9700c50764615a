package localcache

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/config"
)

func limit(path string, n int64) *config.Limit {
	return &config.Limit{Path: path, Algorithm: "fixed_window", Unit: config.UnitSecond, RequestsPerUnit: uint32(n),
		Rule: ratelimit.FixedWindow{Limit: n, Window: time.Second}}
}

// TestGenerations: a limit keeps its generation across configurations while
// its rule at its path is unchanged; a changed rule, or a path that left
// and came back, gets a new one; a limit outside the generations (an
// override) is keyed by its numbers.
func TestGenerations(t *testing.T) {
	c := New(1<<20, clock.NewFake(time.Unix(1_700_000_000, 0)))
	a, b := limit("api|a", 3), limit("api|b", 3)
	g1 := c.Generations(slices.Values([]*config.Limit{a, b}))
	a2, b2 := limit("api|a", 3), limit("api|b", 4)
	g2 := c.Generations(slices.Values([]*config.Limit{a2, b2}))
	if g2[a2] != g1[a] || g2[b2] == g1[b] {
		t.Fatalf("unchanged %d→%d, want the same; changed %d→%d, want a new one", g1[a], g2[a2], g1[b], g2[b2])
	}
	g3 := c.Generations(slices.Values([]*config.Limit{b2}))
	a4 := limit("api|a", 3)
	g4 := c.Generations(slices.Values([]*config.Limit{a4, b2}))
	if g4[a4] == g1[a] || g4[b2] != g3[b2] {
		t.Fatalf("a limit back after a configuration without it: %d, was %d", g4[a4], g1[a])
	}
	var k1, k2, k3 []byte
	k1 = c.Key(k1, g4, a4, "api|a")
	k2 = c.Key(k2, g4, limit("api|a", 3), "api|a") // an override of the same numbers
	k3 = c.Key(k3, g4, limit("api|a", 5), "api|a")
	if bytes.Equal(k1, k2) || bytes.Equal(k2, k3) {
		t.Fatalf("keys not distinct: %x %x %x", k1, k2, k3)
	}
}

// TestLookupRemember: a denial is found for a cost at least the one denied
// until its RetryAfter ends, counted from before the store call; a peek, a
// smaller cost or an admission never is.
func TestLookupRemember(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	clk := clock.NewFake(start)
	c := New(1<<20, clk)
	key := []byte("k")
	c.Remember(key, 2, ratelimit.Result{RetryAfter: 500 * time.Millisecond, ResetAfter: time.Second, Remaining: 1}, start)
	c.Remember([]byte("ok"), 1, ratelimit.Result{Allowed: true}, start)
	if _, ok := c.Lookup([]byte("ok"), 1, start); ok {
		t.Fatal("an admission was kept")
	}
	if _, ok := c.Lookup(key, 0, start); ok {
		t.Fatal("a peek was found")
	}
	if _, ok := c.Lookup(key, 1, start); ok {
		t.Fatal("a smaller cost than the one denied was found")
	}
	now := start.Add(200 * time.Millisecond)
	r, ok := c.Lookup(key, 3, now)
	if !ok || r.RetryAfter != 300*time.Millisecond || r.ResetAfter != 800*time.Millisecond || r.Remaining != 1 {
		t.Fatalf("at 200ms: %+v %v, want retry after 300ms, reset after 800ms, 1 remaining", r, ok)
	}
	if _, ok := c.Lookup(key, 2, start.Add(500*time.Millisecond)); ok {
		t.Fatal("found when its RetryAfter ended")
	}
	if c.LookupCount() != 4 || c.HitCount() != 1 || c.MissCount() != 3 {
		t.Fatalf("lookups %d, hits %d, misses %d; want 4, 1, 3", c.LookupCount(), c.HitCount(), c.MissCount())
	}
	if c.Now() != start {
		t.Fatalf("Now %v, want the clock's %v", c.Now(), start)
	}
}
