package main

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/loadtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestStallBound is the store-hiccup issue's measure, as a process test:
// one floodgate serve --redis with its defaults (50 ms timeout, breaker,
// the degraded failure mode), a fixed window of 100 per second on one key,
// 20 closed-loop gRPC clients, and Redis paused (SIGSTOP) for 100 ms and,
// separately, for 2 s. In every one-second window the admitted decisions,
// however decided, are at most 1.05 × the limit + 2; decisions go on during
// the pause (admitted in process, not all refused nor all failed); and
// after it the store decides again. Counts, not timings: each admitted
// answer is placed in its window by the window's end, which the answer
// carries (duration_until_reset). It runs with serve's defaults and with
// quota leases (--leases), which decide from what they hold through a
// pause before the degraded mode does.
func TestStallBound(t *testing.T) {
	for _, run := range []struct {
		name   string
		pause  time.Duration
		leases bool
	}{
		{"100ms", 100 * time.Millisecond, false},
		{"2s", 2 * time.Second, false},
		{"100ms-leases", 100 * time.Millisecond, true},
		{"2s-leases", 2 * time.Second, true},
	} {
		pause := run.pause
		t.Run(run.name, func(t *testing.T) {
			r := testenv.NewRedis(t)
			cfg := filepath.Join(t.TempDir(), "c.yaml")
			writeConfig(t, cfg, "domain: hot\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100}\n")
			// --timeout given at its default, so that the tests' generous
			// store timeout is not added: the production settings are measured.
			s := startServer(t, cfg, "--redis", redisURL(r), "--redis-prefix", uniquePrefix(t), "--timeout", "50ms",
				fmt.Sprintf("--leases=%v", run.leases))

			var (
				windows          loadtest.Windows
				mu               sync.Mutex
				answered, failed int
				during           int
			)
			req := request("hot", entries("k", "x"))
			call := func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := s.client.ShouldRateLimit(ctx, req)
				got := time.Now()
				cancel()
				mu.Lock()
				answered++
				if err != nil {
					failed++
				}
				mu.Unlock()
				if err == nil && resp.GetOverallCode() == rls.RateLimitResponse_OK {
					windows.Add(got, resp.GetStatuses()[0].GetDurationUntilReset().AsDuration())
				}
			}
			count := func() int {
				mu.Lock()
				defer mu.Unlock()
				return answered
			}
			loadtest.Run(20, 1500*time.Millisecond, 1500*time.Millisecond, call, func() {
				before := count()
				if err := r.Pause(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(pause)
				during = count() - before
				if err := r.Resume(); err != nil {
					t.Fatal(err)
				}
			})
			line := windows.Check(t, 107) // 1.05 × 100 + 2
			t.Logf("Redis paused %v: %d answers (%d during the pause, %d errors); admitted per window:%s", pause, answered, during, failed, line)
			if failed > 0 {
				t.Errorf("%d calls failed: the degraded mode answers every call", failed)
			}
			if during == 0 {
				t.Errorf("no answer while Redis was paused")
			}
			// The store decides again: a key it has not seen is counted in Redis.
			deadline := time.Now().Add(10 * time.Second)
			for {
				s.mustRL(request("hot", entries("k", "after")))
				if n := s.metric("", "floodgate_decisions_total", "result", "within_limit"); n > 0 && countKeys(t, r, "after") > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the store did not decide again after Redis resumed")
				}
				time.Sleep(50 * time.Millisecond)
			}
			// With leases, a short pause may be decided from them alone.
			if got := s.metric("", "floodgate_failure_mode_total", "mode", "degraded"); got < 1 && (!run.leases || pause > time.Second) {
				t.Errorf("floodgate_failure_mode_total{mode=degraded} = %v after a pause of %v", got, pause)
			}
		})
	}
}

// countKeys counts r's keys that contain part.
func countKeys(t *testing.T, r *testenv.Redis, part string) int {
	t.Helper()
	n := 0
	for _, k := range redisKeys(t, r) {
		if strings.Contains(k, part) {
			n++
		}
	}
	return n
}

// TestFleetStallBound: three servers share one Redis and one hot key (100
// a second), under 30 closed-loop clients, with serve's defaults (the
// degraded mode), on a machine kept busy: a CPU hog of as many
// goroutines as cores runs in the test process throughout, so store calls
// also time out now and then while Redis is healthy. First healthy, then
// Redis SIGKILLed for 5 s and restarted: in every one-second window the
// fleet admits at most 1.1 × the limit, while Redis is down the servers
// keep deciding (each its third, from the heartbeats' count), and after
// the restart the store decides again, nothing left broken. It runs with
// serve's defaults and with quota leases (--leases), where each server's
// last answer from the store is only as recent as its last lease.
func TestFleetStallBound(t *testing.T) {
	t.Run("defaults", func(t *testing.T) { fleetStallBound(t, false) })
	t.Run("leases", func(t *testing.T) { fleetStallBound(t, true) })
}

func fleetStallBound(t *testing.T, leases bool) {
	r := testenv.NewRedis(t)
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	writeConfig(t, cfg, "domain: hot\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100}\n")
	prefix := uniquePrefix(t)
	var servers []*fgServer
	for range 3 {
		servers = append(servers, startServer(t, cfg, "--redis", redisURL(r), "--redis-prefix", prefix, "--timeout", "50ms",
			fmt.Sprintf("--leases=%v", leases)))
	}
	// The heartbeats: every server counts three before the fault.
	deadline := time.Now().Add(10 * time.Second)
	for countKeys(t, r, "{floodgate}:servers") == 0 || serversSeen(t, r, prefix) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the three servers' heartbeats are not all in Redis after 10 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // a beat of each since all three were up

	var (
		windows loadtest.Windows
		mu      sync.Mutex
		failed  int
		phase   = "healthy"
		byPhase = map[string]int{}
		next    atomic.Int64
	)
	req := request("hot", entries("k", "x"))
	call := func() {
		s := servers[next.Add(1)%3]
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := s.client.ShouldRateLimit(ctx, req)
		got := time.Now()
		cancel()
		mu.Lock()
		byPhase[phase]++
		if err != nil {
			failed++
		}
		mu.Unlock()
		if err == nil && resp.GetOverallCode() == rls.RateLimitResponse_OK {
			windows.Add(got, resp.GetStatuses()[0].GetDurationUntilReset().AsDuration())
		}
	}
	setPhase := func(p string) {
		mu.Lock()
		phase = p
		mu.Unlock()
	}
	stopHog := loadtest.Hog(runtime.NumCPU())
	loadtest.Run(30, 2*time.Second, 2*time.Second, call, func() {
		setPhase("killed")
		if err := r.Kill(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		if err := r.Restart(); err != nil {
			t.Fatal(err)
		}
		setPhase("restarted")
	})
	stopHog()
	line := windows.Check(t, 110) // 1.1 × 100
	t.Logf("answers by phase %v, %d errors; admitted per window:%s", byPhase, failed, line)
	if failed > 0 {
		t.Errorf("%d calls failed: the degraded mode answers every call", failed)
	}
	if byPhase["killed"] == 0 {
		t.Error("no answer while Redis was down")
	}
	// Nothing left broken: each server's store decides again.
	for i, s := range servers {
		key := fmt.Sprint("after", i)
		deadline := time.Now().Add(10 * time.Second)
		for countKeys(t, r, key) == 0 {
			s.mustRL(request("hot", entries("k", key)))
			if time.Now().After(deadline) {
				t.Fatalf("server %d: the store did not decide again after the restart", i)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// serversSeen is the number of live servers in the heartbeats' set of the
// servers under prefix.
func serversSeen(t *testing.T, r *testenv.Redis, prefix string) int {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	n, err := c.ZCard(t.Context(), prefix+":{floodgate}:servers").Result()
	if err != nil {
		return 0
	}
	return int(n)
}
