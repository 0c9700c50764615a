package server

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/server/storeurl"
)

const chargeYAML = `domain: ai
descriptors:
  - key: user
    charge: always
    rate_limit: {unit: minute, requests_per_unit: 6000, algorithm: token_bucket, burst: 1000}
  - key: team
    charge: always
    rate_limit: {unit: minute, requests_per_unit: 10000}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 10000}
`

// TestChargeAIGateway drives the server as an AI gateway does through
// Envoy: each client checks with cost 0 (hits_addend 0) before its work,
// and reports what the work used (50 to 400 tokens) afterwards, on limits
// that say charge: always; 8 clients at once, for 3 minutes of a fake
// clock, on every backend. Every report is recorded, whatever the answer.
// After each second, with no call in flight, the check is admitted exactly
// when the key is not in debt: for the token bucket of 6,000 a minute with
// a burst of 1,000, when the tokens recorded are at most 1,000 plus 100 a
// second elapsed (the bucket, drained by constant demand, never sits full);
// for the fixed window of 10,000 a minute, when the window's recorded
// tokens are at most 10,000. So the tokens recorded never exceed the
// budget by more than the reports in flight when the debt began (8 × 400).
func TestChargeAIGateway(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // a minute's start
	for _, k := range backendtest.All() {
		t.Run(k.Name, func(t *testing.T) {
			fake := clock.NewFake(start)
			m := NewMetrics()
			s, err := NewService(k.Make(t, fake), Options{Metrics: m})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.SetConfig(mustConfig(t, chargeYAML), "v1"); err != nil {
				t.Fatal(err)
			}
			const clients = 8
			recorded := map[string]int64{} // all time, per key
			inWindow := map[string]int64{} // the fixed window's current minute
			for sec := 0; sec < 180; sec++ {
				now := start.Add(time.Duration(sec) * time.Second)
				fake.Set(now)
				if sec%60 == 0 {
					inWindow["team"] = 0
				}
				var mu sync.Mutex
				var wg sync.WaitGroup
				for c := range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rng := rand.New(rand.NewPCG(uint64(sec), uint64(c)))
						for _, key := range []string{"user", "team"} {
							chk, err := s.Decide(context.Background(), &Request{Domain: "ai", Descriptors: []Descriptor{desc(0, key, "bob")}})
							if err != nil {
								t.Error(err)
								return
							}
							if chk.Code != CodeOK {
								continue
							}
							used := 50 + rng.Int64N(351)
							if _, err := s.Decide(context.Background(), &Request{Domain: "ai", Descriptors: []Descriptor{desc(used, key, "bob")}}); err != nil {
								t.Error(err)
								return
							}
							mu.Lock()
							recorded[key] += used
							if key == "team" {
								inWindow[key] += used
							}
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				if t.Failed() {
					return
				}
				budget := map[string]int64{"user": 1000 + 100*int64(sec), "team": 10000}
				spent := map[string]int64{"user": recorded["user"], "team": inWindow["team"]}
				for _, key := range []string{"user", "team"} {
					chk := decideAI(t, s, desc(0, key, "bob"))
					if want := spent[key] <= budget[key]; (chk.Code == CodeOK) != want {
						t.Fatalf("second %d, %s: check %v with %d recorded against a budget of %d; want admitted = %v", sec, key, chk.Code, spent[key], budget[key], want)
					}
					if spent[key] > budget[key]+clients*400 {
						t.Fatalf("second %d, %s: %d recorded against a budget of %d: more than the reports in flight past it", sec, key, spent[key], budget[key])
					}
				}
			}
			// The whole budget was used: demand far exceeds it.
			if u := recorded["user"]; u < 1000+100*179 {
				t.Errorf("the token bucket recorded %d in 3 minutes, less than its budget of %d", u, 1000+100*179)
			}
			pathOf := func(key string) string { return decideAI(t, s, desc(0, key, "bob")).Statuses[0].Limit.Path }
			if got := metricValue(t, m, "floodgate_charged_units_total", "descriptor", pathOf("user")); int64(got) != recorded["user"] {
				t.Errorf("floodgate_charged_units_total{user} = %v, want %d", got, recorded["user"])
			}
			if got := metricValue(t, m, "floodgate_charged_over_units_total", "descriptor", pathOf("team")); got <= 0 {
				t.Errorf("floodgate_charged_over_units_total{team} = %v, want the units past the window's limit", got)
			}
			// Without charge: a cost past what remains is refused and not
			// recorded, as before.
			decideAI(t, s, desc(9000, "plain", "bob"))
			if r := decideAI(t, s, desc(5000, "plain", "bob")); r.Code != CodeOverLimit || r.Statuses[0].Remaining != 1000 {
				t.Errorf("plain limit, 5000 over 1000 left: %+v", r.Statuses[0])
			}
			if r := decideAI(t, s, desc(1, "plain", "bob")); r.Code != CodeOK || r.Statuses[0].Remaining != 999 {
				t.Errorf("plain limit after a refusal: %+v; want the refused cost not recorded", r.Statuses[0])
			}
		})
	}
}

// decideAI decides ds in chargeYAML's domain.
func decideAI(t *testing.T, s *Service, ds ...Descriptor) *Response {
	t.Helper()
	r, err := s.Decide(context.Background(), &Request{Domain: "ai", Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestChargeThroughPause: a charge that comes while Redis is paused is
// answered by the degraded mode (this server's share of what the store
// had left) and owed to the store; when Redis is back, the next call
// carries it, so the hour counts it once and never admits past its limit.
func TestChargeThroughPause(t *testing.T) {
	awayFromHourEnd()
	r := testenv.NewRedis(t)
	b, c, err := storeurl.Open("redis://"+r.Addr, backendtest.UniquePrefix(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s := newService(t, b, Options{
		FailureMode: FailDegraded,
		Servers:     1,
		Timeout:     100 * time.Millisecond,
		Breaker:     BreakerOptions{Failures: 1, Cooldown: 200 * time.Millisecond},
	})
	if err := s.SetConfig(mustConfig(t, "domain: ai\ndescriptors:\n  - key: user\n    charge: always\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n"), "v1"); err != nil {
		t.Fatal(err)
	}
	if got := decideAI(t, s, desc(600, "user", "bob")); got.Code != CodeOK {
		t.Fatalf("healthy charge: %+v", got)
	}
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			r.Resume()
		}
	}()
	got := decideAI(t, s, desc(300, "user", "bob"))
	if !got.Degraded || got.Code != CodeOK || got.Statuses[0].Remaining != 100 {
		t.Fatalf("a charge while Redis is paused: %+v; want the degraded mode to admit it with 100 left", got)
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	deadline := time.Now().Add(10 * time.Second)
	for {
		chk := decideAI(t, s, desc(0, "user", "bob"))
		if !chk.Failed {
			// 600 and the 300 owed: 100 left. The charge sent while Redis
			// was paused may also have reached it when it resumed (its
			// answer lost to the timeout): then the store counted it too,
			// the debt did not fit and spent what was left — counted
			// twice, under-admitted, never over.
			if st := chk.Statuses[0]; chk.Code == CodeOK && st.Remaining != 100 || chk.Code != CodeOK && st.RetryAfter <= 0 {
				t.Fatalf("after the pause, the check: %v %+v; want OK with 100 left, or over the limit", chk.Code, st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the store did not decide again within 10 s of Redis resuming")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := decideAI(t, s, desc(200, "user", "bob")); got.Code != CodeOverLimit || got.Failed {
		t.Errorf("200 more past the 100 left: %+v; want OVER_LIMIT from the store (recorded as debt)", got)
	}
}
