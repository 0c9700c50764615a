package main

import (
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestChargeOverRLS drives floodgate serve on Redis through RLS gRPC as an
// AI gateway does: 8 clients, each checking with descriptor hits_addend 0
// before its work and reporting 50 to 400 tokens with hits_addend after
// it, on a limit with charge: always — a token bucket of 6,000 tokens a
// minute with a burst of 1,000 — for 3 s. The tokens recorded never exceed
// the burst, plus the refill of the time elapsed, plus the reports in
// flight (8 × 400); every report is recorded (floodgate_charged_units_total
// counts them all); and once the clients stop, a key far in debt is
// refused.
func TestChargeOverRLS(t *testing.T) {
	r := testenv.SharedRedis(t)
	cfg := filepath.Join(t.TempDir(), "ai.yaml")
	writeConfig(t, cfg, "domain: ai\ndescriptors:\n  - key: user\n    charge: always\n    rate_limit: {unit: minute, requests_per_unit: 6000, algorithm: token_bucket, burst: 1000}\n")
	s := startServer(t, cfg, "--redis", redisURL(r), "--redis-prefix", uniquePrefix(t))
	var recorded, reports atomic.Int64
	start := time.Now()
	stop := start.Add(3 * time.Second)
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for time.Now().Before(stop) {
				chk, err := s.rl(request("ai", withHits(entries("user", "bob"), 0)))
				if err != nil {
					t.Error(err)
					return
				}
				if chk.GetOverallCode() != rls.RateLimitResponse_OK {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				used := 50 + rng.Int64N(351)
				if _, err := s.rl(request("ai", withHits(entries("user", "bob"), uint64(used)))); err != nil {
					t.Error(err)
					return
				}
				recorded.Add(used)
				reports.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	got := recorded.Load()
	budget := 1000 + int64(100*elapsed.Seconds())
	t.Logf("%d reports, %d tokens recorded in %v against a budget of %d", reports.Load(), got, elapsed.Round(time.Millisecond), budget)
	if got > budget+8*400 {
		t.Errorf("%d tokens recorded in %v: more than the budget of %d plus the reports in flight", got, elapsed, budget)
	}
	if got < 1000 {
		t.Errorf("only %d tokens recorded: the burst of 1,000 was not used", got)
	}
	if m := s.metric("", "floodgate_charged_units_total"); int64(m) != got {
		t.Errorf("floodgate_charged_units_total = %v, want every report's tokens, %d", m, got)
	}
	// Far in debt: a report of 100,000 tokens, then the check is refused.
	s.mustRL(request("ai", withHits(entries("user", "bob"), 100000)))
	if chk := s.mustRL(request("ai", withHits(entries("user", "bob"), 0))); chk.GetOverallCode() != rls.RateLimitResponse_OVER_LIMIT {
		t.Errorf("the check after 100,000 tokens past the budget: %v, want OVER_LIMIT", chk.GetOverallCode())
	}
}
