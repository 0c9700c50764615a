package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/server/storeurl"
)

const localCacheYAML = `domain: api
descriptors:
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: fixed
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: sliding
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: sliding_window}
  - key: log
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: sliding_log}
  - key: token
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: token_bucket, burst: 4}
  - key: leaky
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: leaky_bucket, burst: 2, delay: nodelay}
  - key: gcra
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: gcra, burst: 3}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 2}
`

// scriptCalls is how many scripts Redis has run (EVALSHA, EVAL, FCALL and
// their read-only forms), from INFO commandstats.
func scriptCalls(t testing.TB, r *testenv.Redis) int {
	t.Helper()
	v, err := r.Do(context.Background(), "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case []byte:
		s = string(v)
	default:
		t.Fatalf("INFO: %T", v)
	}
	n := 0
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		switch name {
		case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_evalsha_ro", "cmdstat_eval_ro", "cmdstat_fcall", "cmdstat_fcall_ro":
		default:
			continue
		}
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		c, err := strconv.Atoi(calls)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		n += c
	}
	return n
}

// TestLocalCacheAttackSavesStoreCalls: N requests for one key over its limit
// (5 a minute) on a private Redis cost a handful of script calls with the
// local cache, one each without; a key under its limit, asked between them,
// is never answered from the cache.
func TestLocalCacheAttackSavesStoreCalls(t *testing.T) {
	r := testenv.NewRedis(t)
	const n = 2000
	run := func(cacheBytes int) (calls int, hits float64) {
		b, c, err := storeurl.Open("redis://"+r.Addr, backendtest.UniquePrefix(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		m := NewMetrics()
		s := newService(t, b, Options{LocalCacheBytes: cacheBytes, Metrics: m, Timeout: time.Second})
		if err := s.SetConfig(mustConfig(t, localCacheYAML), "v1"); err != nil {
			t.Fatal(err)
		}
		before := scriptCalls(t, r)
		over, victimOK := 0, 0
		for i := range n {
			if decide(t, s, desc(1, "ip", "attacker")).Code == CodeOverLimit {
				over++
			}
			if i%500 == 0 { // 4 requests: within the victim's 5 a minute
				vr := decide(t, s, desc(1, "ip", "victim"))
				if vr.Code != CodeOK {
					t.Errorf("request %d: the victim, under its limit, answered %v", i, vr.Code)
				}
				victimOK++
			}
		}
		if over < n-10 { // 5 admitted, 5 more if a minute began meanwhile
			t.Errorf("cache %d: %d of %d over the limit", cacheBytes, over, n)
		}
		calls = scriptCalls(t, r) - before
		if cacheBytes > 0 {
			hits = localCacheHits(t, m)
		}
		t.Logf("local cache %d bytes: %d requests for one key over its limit and %d under it: %d script calls, %.0f answered from the cache", cacheBytes, n, victimOK, calls, hits)
		return calls, hits
	}
	without, _ := run(0)
	with, hits := run(1 << 20)
	if without < n {
		t.Errorf("without the cache: %d script calls for %d requests", without, n)
	}
	// With it: the attacker's 5 admitted and 1 denied (twice if a minute
	// began), and the victim's 4, all asked; everything else from the cache.
	if with > 20 || with*50 > without {
		t.Errorf("with the cache: %d script calls, without %d: want far fewer", with, without)
	}
	if hits < n-20 {
		t.Errorf("%.0f hits of the cache, want about %d", hits, n-6)
	}
	t.Logf("store calls saved: %d → %d (%.0f×)", without, with, float64(without)/float64(max(with, 1)))
}

// TestLocalCacheSameAnswers: on a fake clock, random traffic of random
// costs against every algorithm, shadow mode and envoy's modes gets the same
// answers with the local cache as without it, window edges included (the
// clock steps land on them), and the cache answers some of it.
func TestLocalCacheSameAnswers(t *testing.T) {
	keys := []string{"fixed", "sliding", "log", "token", "leaky", "gcra", "shadow"}
	modes := []struct {
		name  string
		envoy EnvoyOptions
	}{
		{"floodgate", EnvoyOptions{}},
		{"envoy", EnvoyOptions{Enabled: true}},
		{"envoy-stop-increment", EnvoyOptions{Enabled: true, StopIncrementWhenOverLimit: true}},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			start := time.Unix(1_700_000_000, 0)
			clk := clock.NewFake(start)
			var svcs [2]*Service
			var m *Metrics
			for k := range svcs {
				opts := Options{Envoy: mode.envoy}
				if k == 1 {
					m = NewMetrics()
					opts.LocalCacheBytes, opts.Metrics = 1<<20, m
				}
				svcs[k] = newService(t, backend.NewMemory(backend.WithClock(clk)), opts)
				if err := svcs[k].SetConfig(mustConfig(t, localCacheYAML), "v1"); err != nil {
					t.Fatal(err)
				}
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(mode.name))))
			steps := []time.Duration{0, 0, 0, time.Millisecond, 37 * time.Millisecond, 100 * time.Millisecond, 333 * time.Millisecond}
			var hist []string
			for i := range 20000 {
				if rng.IntN(4) == 0 {
					now := clk.Now()
					d := steps[rng.IntN(len(steps))]
					if rng.IntN(8) == 0 {
						// To the next whole second, or a nanosecond before it: a window edge.
						d = now.Truncate(time.Second).Add(time.Second).Sub(now) - time.Duration(rng.IntN(2))
					}
					clk.Advance(d)
				}
				var ds []Descriptor
				for range 1 + rng.IntN(2) {
					ds = append(ds, desc(int64(1+rng.IntN(3)/2), keys[rng.IntN(len(keys))], strconv.Itoa(rng.IntN(2))))
				}
				var got [2]*Response
				hist = append(hist[max(0, len(hist)-40):], fmt.Sprintf("%d at %v: %v", i, clk.Now().Sub(start), ds))
				for k, s := range svcs {
					r, err := s.Decide(context.Background(), &Request{Domain: "api", Descriptors: ds})
					if err != nil {
						t.Fatal(err)
					}
					got[k] = r
				}
				hist[len(hist)-1] += " -> " + summary(got[0]) + " / " + summary(got[1]) + fmt.Sprintf(" %+v", got[0].Statuses[0])
				if a, b := summary(got[0]), summary(got[1]); a != b {
					for _, h := range hist {
						t.Log(h)
					}
					t.Fatalf("step %d at %v, %v: without the cache %s, with it %s", i, clk.Now().Sub(start), ds, a, b)
				}
			}
			hits := localCacheHits(t, m)
			if hits < 1000 {
				t.Errorf("%.0f descriptors answered from the cache", hits)
			}
			t.Logf("%.0f descriptors answered from the cache", hits)
		})
	}
}

func summary(r *Response) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v[", r.Code)
	for _, st := range r.Statuses {
		fmt.Fprintf(&b, " %v", st.Code)
		if st.Shadow {
			b.WriteString("(shadow)")
		}
	}
	b.WriteString(" ]")
	return b.String()
}

// TestLocalCacheWindowEdge: a fixed window's denial is answered from the
// cache until the last nanosecond of the window, and the first request of
// the next window is asked of the store and admitted.
func TestLocalCacheWindowEdge(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 500_000_000))
	m := NewMetrics()
	s := newService(t, backend.NewMemory(backend.WithClock(clk)), Options{LocalCacheBytes: 1 << 20, Metrics: m})
	if err := s.SetConfig(mustConfig(t, localCacheYAML), "v1"); err != nil {
		t.Fatal(err)
	}
	hits := func() float64 { return localCacheHits(t, m) }
	for i := range 3 {
		if c := decide(t, s, desc(1, "fixed", "a")).Code; c != CodeOK {
			t.Fatalf("request %d: %v", i, c)
		}
	}
	if r := decide(t, s, desc(1, "fixed", "a")); r.Code != CodeOverLimit || hits() != 0 {
		t.Fatalf("4th request: %v, %v hits; want OVER_LIMIT from the store", r.Code, hits())
	}
	r := decide(t, s, desc(1, "fixed", "a"))
	if r.Code != CodeOverLimit || hits() != 1 || r.Statuses[0].RetryAfter != 500*time.Millisecond {
		t.Fatalf("5th request: %v, %v hits, retry after %v; want OVER_LIMIT from the cache, 500ms", r.Code, hits(), r.Statuses[0].RetryAfter)
	}
	// A cost of 0 peeks: never from the cache.
	if r := decide(t, s, desc(0, "fixed", "a")); r.Code != CodeOK || hits() != 1 {
		t.Fatalf("a peek: %v, %v hits", r.Code, hits())
	}
	clk.Set(time.Unix(1_700_000_001, -1))
	if r := decide(t, s, desc(1, "fixed", "a")); r.Code != CodeOverLimit || hits() != 2 || r.Statuses[0].RetryAfter != time.Nanosecond {
		t.Fatalf("last nanosecond: %v, %v hits, retry after %v", r.Code, hits(), r.Statuses[0].RetryAfter)
	}
	clk.Set(time.Unix(1_700_000_001, 0))
	if r := decide(t, s, desc(1, "fixed", "a")); r.Code != CodeOK || hits() != 2 {
		t.Fatalf("next window: %v, %v hits; want OK from the store", r.Code, hits())
	}
}

// TestLocalCacheReload: a reload that changes a limit drops the cached
// denials of that limit (the raised limit admits at once); an unchanged
// limit keeps its own.
func TestLocalCacheReload(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	m := NewMetrics()
	s := newService(t, backend.NewMemory(backend.WithClock(clk)), Options{LocalCacheBytes: 1 << 20, Metrics: m})
	if err := s.SetConfig(mustConfig(t, localCacheYAML), "v1"); err != nil {
		t.Fatal(err)
	}
	hits := func() float64 { return localCacheHits(t, m) }
	for _, k := range []string{"ip", "fixed"} {
		limit := map[string]int{"ip": 5, "fixed": 3}[k]
		for range limit + 2 {
			decide(t, s, desc(1, k, "a"))
		}
	}
	if hits() != 2 {
		t.Fatalf("%v hits, want 2", hits())
	}
	raised := strings.Replace(localCacheYAML, "{unit: minute, requests_per_unit: 5}", "{unit: minute, requests_per_unit: 6}", 1)
	if err := s.SetConfig(mustConfig(t, raised), "v2"); err != nil {
		t.Fatal(err)
	}
	if r := decide(t, s, desc(1, "ip", "a")); r.Code != CodeOK || hits() != 2 {
		t.Fatalf("raised limit: %v, %v hits; want OK from the store", r.Code, hits())
	}
	if r := decide(t, s, desc(1, "ip", "a")); r.Code != CodeOverLimit || hits() != 2 {
		t.Fatalf("raised limit, full again: %v, %v hits; want OVER_LIMIT from the store", r.Code, hits())
	}
	if r := decide(t, s, desc(1, "fixed", "a")); r.Code != CodeOverLimit || hits() != 3 {
		t.Fatalf("unchanged limit: %v, %v hits; want OVER_LIMIT from the cache", r.Code, hits())
	}
	// Back to 5: the entries cached under the first 5 are not read again.
	if err := s.SetConfig(mustConfig(t, localCacheYAML), "v3"); err != nil {
		t.Fatal(err)
	}
	if r := decide(t, s, desc(1, "ip", "a")); r.Code != CodeOverLimit || hits() != 3 {
		t.Fatalf("limit restored: %v, %v hits; want OVER_LIMIT from the store", r.Code, hits())
	}
}

// BenchmarkLocalCacheAttack: one key over its limit, decided against a
// private Redis, with and without the local cache; script calls per request
// are reported (store-calls/op).
func BenchmarkLocalCacheAttack(b *testing.B) {
	r := testenv.NewRedis(b)
	for _, size := range []int{0, 1 << 20} {
		b.Run(fmt.Sprintf("cache=%d", size), func(b *testing.B) {
			st, c, err := storeurl.Open("redis://"+r.Addr, backendtest.UniquePrefix(), time.Second)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			s := newService(b, st, Options{LocalCacheBytes: size, Timeout: time.Second})
			if err := s.SetConfig(mustConfig(b, localCacheYAML), "v1"); err != nil {
				b.Fatal(err)
			}
			req := &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "ip", "attacker")}}
			for range 6 {
				s.Decide(context.Background(), req)
			}
			before := scriptCalls(b, r)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.Decide(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(scriptCalls(b, r)-before)/float64(b.N), "store-calls/op")
		})
	}
}

// localCacheHits reads floodgate_local_cache_hits_total.
func localCacheHits(t testing.TB, m *Metrics) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.localCacheHits.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}
