package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/internal/breaker"
	"github.com/floodgate-dev/floodgate/server/internal/tracing"
	"github.com/floodgate-dev/floodgate/server/storeurl"
)

// Tests of the per-second store (Options.PerSecondBackend, stores.go), on
// two private Redis servers.

const perSecondYAML = `domain: api
descriptors:
  - key: sec
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: min
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: 1}
  - key: tensec
    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 5}
  - key: onesec
    rate_limit: {unit: second, unit_multiplier: 1, requests_per_unit: 5}
`

// keysIn returns the keys of r that match pattern.
func keysIn(t *testing.T, r *testenv.Redis, pattern string) []string {
	t.Helper()
	reply, err := r.Do(t.Context(), "KEYS", pattern)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range reply.([]any) {
		out = append(out, fmt.Sprint(k))
	}
	slices.Sort(out)
	return out
}

// hasKey reports whether some key of keys contains sub.
func hasKey(keys []string, sub string) bool {
	return slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, sub) })
}

// openTwoStores opens the main and per-second stores on two fresh private
// Redis servers, with one prefix, as serve does.
func openTwoStores(t *testing.T) (mainR, psR *testenv.Redis, mainB, psB backend.Backend, prefix string) {
	t.Helper()
	mainR, psR = testenv.NewRedis(t), testenv.NewRedis(t)
	prefix = backendtest.UniquePrefix()
	mainB, c1, err := storeurl.Open("redis://"+mainR.Addr, prefix, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c1.Close() })
	psB, c2, err := storeurl.Open("redis://"+psR.Addr, prefix, time.Second, storeurl.Flag("redis-persecond"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c2.Close() })
	return mainR, psR, mainB, psB, prefix
}

// TestPerSecondStoreKeys: the state of limits whose period is one second
// (any algorithm, and request overrides of one second) lands in the
// per-second Redis, every other in the main one, periods of several seconds
// (unit_multiplier) included; a reload that changes a limit's unit moves it.
func TestPerSecondStoreKeys(t *testing.T) {
	mainR, psR, mainB, psB, prefix := openTwoStores(t)
	s, err := NewService(mainB, Options{PerSecondBackend: psB, Metrics: NewMetrics(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetConfig(mustConfig(t, perSecondYAML), "v1"); err != nil {
		t.Fatal(err)
	}
	over := desc(1, "ovr", "o1")
	over.Override = &Override{RequestsPerUnit: 5, Unit: config.UnitSecond}
	overMin := desc(1, "ovrmin", "o2")
	overMin.Override = &Override{RequestsPerUnit: 5, Unit: config.UnitMinute}
	overTen := desc(1, "ovrten", "o3")
	overTen.Override = &Override{RequestsPerUnit: 5, Unit: config.UnitSecond, UnitMultiplier: 10}
	// The per-second fixed windows' keys expire when their second ends:
	// decide well inside one, so that they are still there when listed.
	if left := time.Second - time.Duration(time.Now().UnixNano()%int64(time.Second)); left < 500*time.Millisecond {
		time.Sleep(left + 10*time.Millisecond)
	}
	r := decide(t, s, desc(1, "sec", "alice"), desc(1, "min", "alice"), desc(1, "bucket", "alice"), over, overMin,
		desc(1, "tensec", "alice"), desc(1, "onesec", "alice"), overTen)
	if r.Code != CodeOK || r.Failed {
		t.Fatalf("%+v", r)
	}
	for i, want := range []int64{1, 2, 0, 4, 4, 4, 4, 4} {
		if got := r.Statuses[i].Remaining; got != want {
			t.Errorf("status %d: remaining %d, want %d", i, got, want)
		}
	}
	mainKeys, psKeys := keysIn(t, mainR, prefix+"*"), keysIn(t, psR, prefix+"*")
	for _, k := range []string{"|sec|alice}", "|bucket|alice}", "|ovr_o1}", "|onesec|alice}"} {
		if !hasKey(psKeys, k) || hasKey(mainKeys, k) {
			t.Errorf("%s: want it in the per-second Redis only; main %q, per-second %q", k, mainKeys, psKeys)
		}
	}
	for _, k := range []string{"|min|alice}", "|ovrmin_o2}", "|tensec|alice}", "|ovrten_o3}"} {
		if !hasKey(mainKeys, k) || hasKey(psKeys, k) {
			t.Errorf("%s: want it in the main Redis only; main %q, per-second %q", k, mainKeys, psKeys)
		}
	}

	// A reload makes sec a minute limit: its state moves to the main store
	// (and starts afresh, as any new unit does).
	if err := s.SetConfig(mustConfig(t, strings.Replace(perSecondYAML, "{unit: second, requests_per_unit: 2}", "{unit: minute, requests_per_unit: 2}", 1)), "v2"); err != nil {
		t.Fatal(err)
	}
	if _, err := mainR.Do(t.Context(), "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	if _, err := psR.Do(t.Context(), "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	decide(t, s, desc(1, "sec", "bob"))
	if mainKeys, psKeys := keysIn(t, mainR, prefix+"*"), keysIn(t, psR, prefix+"*"); !hasKey(mainKeys, "|sec|bob}") || len(psKeys) != 0 {
		t.Errorf("after the reload: main %q, per-second %q; want sec_bob in the main Redis only", mainKeys, psKeys)
	}
}

// TestPerSecondSplitDecisions: a request with limits on both stores, on a
// fake clock. A per-second denial consumes nothing from the main store; a
// main-store denial leaves the per-second units spent until the second
// ends (stores.go); requests on one store stay atomic.
func TestPerSecondSplitDecisions(t *testing.T) {
	mainR, psR := testenv.NewRedis(t), testenv.NewRedis(t)
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	s, err := NewService(backendtest.RedisAt(t, mainR.Addr, fake), Options{PerSecondBackend: backendtest.RedisAt(t, psR.Addr, fake)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetConfig(mustConfig(t, perSecondYAML), "v1"); err != nil {
		t.Fatal(err)
	}
	both := func() *Response { return decide(t, s, desc(1, "sec", "u"), desc(1, "min", "u")) }
	type want struct {
		code          Code
		sec, min      Code
		secRem, minRm int64
	}
	check := func(step string, r *Response, w want) {
		t.Helper()
		if r.Code != w.code || r.Statuses[0].Code != w.sec || r.Statuses[1].Code != w.min ||
			r.Statuses[0].Remaining != w.secRem || r.Statuses[1].Remaining != w.minRm {
			t.Fatalf("%s: got %v [sec %v rem %d, min %v rem %d], want %+v", step, r.Code,
				r.Statuses[0].Code, r.Statuses[0].Remaining, r.Statuses[1].Code, r.Statuses[1].Remaining, w)
		}
	}
	check("1st", both(), want{CodeOK, CodeOK, CodeOK, 1, 2})
	check("2nd", both(), want{CodeOK, CodeOK, CodeOK, 0, 1})
	// Over the per-second limit: the minute limit is peeked, not spent.
	check("3rd, over sec", both(), want{CodeOverLimit, CodeOverLimit, CodeOK, 0, 1})
	check("4th, over sec", both(), want{CodeOverLimit, CodeOverLimit, CodeOK, 0, 1})
	fake.Advance(time.Second)
	check("next second", both(), want{CodeOK, CodeOK, CodeOK, 1, 0})
	// Over the minute limit: the per-second unit is spent (documented), so
	// the second is now exhausted for sec alone too.
	check("over min", both(), want{CodeOverLimit, CodeOK, CodeOverLimit, 0, 0})
	if r := decide(t, s, desc(1, "sec", "u")); r.Code != CodeOverLimit {
		t.Fatalf("sec alone after a main-store denial in the same second: %v, want OVER_LIMIT (its unit was spent)", r.Code)
	}
	fake.Advance(time.Second)
	if r := decide(t, s, desc(1, "sec", "u")); r.Code != CodeOK || r.Statuses[0].Remaining != 1 {
		t.Fatalf("sec alone in the next second: %+v", r.Statuses[0])
	}
	// Two per-second descriptors, one over: the other consumes nothing (one
	// store, one atomic step).
	decide(t, s, desc(1, "bucket", "v"))
	if r := decide(t, s, desc(1, "sec", "v"), desc(1, "bucket", "v")); r.Code != CodeOverLimit || r.Statuses[0].Code != CodeOK || r.Statuses[0].Remaining != 2 {
		t.Fatalf("sec and an exhausted bucket: %+v", r.Statuses)
	}
}

// TestPerSecondStoreDown: one store paused (SIGSTOP). Under allow its
// descriptors are answered OK and the other store's are decided; under deny
// the request is denied and the main store consumes nothing; under error
// the request fails naming the per-second store. /readyz stays 200 while
// one store is down, saying which, and turns 503 when both are.
func TestPerSecondStoreDown(t *testing.T) {
	mainR, psR, mainB, psB, _ := openTwoStores(t)
	for _, mode := range []FailureMode{FailOpen, FailClosed, FailError} {
		t.Run(mode.String(), func(t *testing.T) {
			m := NewMetrics()
			s, err := NewService(mainB, Options{
				PerSecondBackend: psB, FailureMode: mode, Metrics: m,
				Timeout: 500 * time.Millisecond, PerSecondTimeout: 30 * time.Millisecond,
				Breaker: BreakerOptions{Failures: 2, Cooldown: time.Hour},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.SetConfig(mustConfig(t, perSecondYAML), "v1"); err != nil {
				t.Fatal(err)
			}
			user := "u-" + mode.String()
			if err := psR.Pause(); err != nil {
				t.Fatal(err)
			}
			defer psR.Resume()
			for i := range 3 {
				start := time.Now()
				r, err := s.Decide(context.Background(), &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "sec", user), desc(1, "min", user)}})
				// Bounded by the 30ms store timeout, not by the paused
				// Redis; the margin is for a loaded CI machine under -race.
				if took := time.Since(start); took > 5*time.Second {
					t.Fatalf("request %d took %v", i, took)
				}
				switch mode {
				case FailOpen:
					if err != nil || !r.Failed || r.Code != CodeOK || r.Statuses[0].Code != CodeOK || r.Statuses[1].Remaining != int64(2-i) {
						t.Fatalf("request %d: %+v %v; want OK, the minute limit decided (remaining %d)", i, r, err, 2-i)
					}
				case FailClosed:
					if err != nil || !r.Failed || r.Code != CodeOverLimit || r.Statuses[0].Code != CodeOverLimit {
						t.Fatalf("request %d: %+v %v", i, r, err)
					}
				case FailError:
					if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "per-second store") {
						t.Fatalf("request %d: %v, want ErrUnavailable naming the per-second store", i, err)
					}
				}
			}
			// The main store alone is decided as usual.
			if r, err := s.Decide(context.Background(), &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "min", user+"-alone")}}); err != nil || r.Failed || r.Statuses[0].Remaining != 2 {
				t.Fatalf("main store alone with the per-second one down: %+v %v", r, err)
			}
			if mode != FailOpen {
				// Denied or failed requests consumed nothing from the main store.
				if r := decide(t, s, desc(0, "min", user)); r.Statuses[0].Remaining != 3 {
					t.Fatalf("the minute limit after %v answers: remaining %d, want 3", mode, r.Statuses[0].Remaining)
				}
			}
			open, total, ok := s.PerSecondStoreHealth()
			if !ok || open != total || !s.Ready() {
				t.Fatalf("per-second store: %d of %d breakers open, ready %v; want all open and still ready", open, total, s.Ready())
			}
			if got := counterValue(t, m.backendErrors.WithLabelValues("timeout", storePerSecond)); got < 2 {
				t.Errorf("floodgate_backend_errors_total{reason=timeout,store=persecond} = %v, want >= 2", got)
			}
			if got := counterValue(t, m.backendErrors.WithLabelValues("timeout", storeMain)); got != 0 {
				t.Errorf("floodgate_backend_errors_total{reason=timeout,store=main} = %v, want 0", got)
			}
			if g := gaugeValue(t, m.breakerOpenPS); g != 1 {
				t.Errorf("floodgate_breaker_open{store=persecond} = %v, want 1", g)
			}
			h := NewHTTPHandler(s, HTTPOptions{})
			code, body := getReadyz(h)
			if code != http.StatusOK || !strings.Contains(body, "per-second store is failing") {
				t.Errorf("/readyz with the per-second store down: %d %q", code, body)
			}
			// Both down: not ready.
			if err := mainR.Pause(); err != nil {
				t.Fatal(err)
			}
			defer mainR.Resume()
			for range 3 {
				s.Decide(context.Background(), &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "min", user)}})
			}
			if code, body := getReadyz(h); code != http.StatusServiceUnavailable || !strings.Contains(body, "both stores") || s.Ready() {
				t.Errorf("/readyz with both stores down: %d %q", code, body)
			}
			mainR.Resume()
			psR.Resume()
		})
	}
}

// TestPerSecondMainStoreDown: the main store paused, the per-second store
// fine: per-second limits are decided, a request on both is answered by the
// failure mode for the main store's part (allow) after spending its
// per-second units.
func TestPerSecondMainStoreDown(t *testing.T) {
	mainR, _, mainB, psB, _ := openTwoStores(t)
	m := NewMetrics()
	s, err := NewService(mainB, Options{PerSecondBackend: psB, Metrics: m, Timeout: 30 * time.Millisecond,
		PerSecondTimeout: 5 * time.Second, Breaker: BreakerOptions{Failures: 2, Cooldown: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetConfig(mustConfig(t, perSecondYAML), "v1"); err != nil {
		t.Fatal(err)
	}
	if err := mainR.Pause(); err != nil {
		t.Fatal(err)
	}
	defer mainR.Resume()
	r := decide(t, s, desc(1, "sec", "w"), desc(1, "min", "w"))
	if !r.Failed || r.Code != CodeOK || r.Statuses[0].Remaining != 1 {
		t.Fatalf("main store down: %+v; want OK with the per-second limit decided", r)
	}
	if r := decide(t, s, desc(1, "bucket", "w")); r.Failed || r.Statuses[0].Remaining != 0 {
		t.Fatalf("a per-second limit alone with the main store down: %+v", r)
	}
	if got := counterValue(t, m.backendErrors.WithLabelValues("timeout", storeMain)); got < 1 {
		t.Errorf("floodgate_backend_errors_total{reason=timeout,store=main} = %v, want >= 1", got)
	}
}

// TestPerSecondOptions: a negative per-second timeout is refused; without
// one the per-second store gets Timeout.
func TestPerSecondOptions(t *testing.T) {
	m := backend.NewMemory()
	if _, err := NewService(m, Options{PerSecondBackend: backend.NewMemory(), PerSecondTimeout: -time.Second}); err == nil {
		t.Error("a negative PerSecondTimeout was accepted")
	}
	if _, err := NewService(m, Options{PerSecondBackend: m}); err == nil {
		t.Error("the main backend was accepted as the per-second one")
	}
	s, err := NewService(m, Options{PerSecondBackend: backend.NewMemory(), Timeout: 70 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if s.ps.timeout != 70*time.Millisecond || s.main.timeout != 70*time.Millisecond {
		t.Errorf("timeouts %v, %v; want Timeout's", s.main.timeout, s.ps.timeout)
	}
	if _, _, ok := newService(t, m, Options{}).PerSecondStoreHealth(); ok {
		t.Error("PerSecondStoreHealth reports a per-second store that is not there")
	}
}

func getReadyz(h http.Handler) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

// TestPerSecondEnvoyModes: envoy's modes across two stores. By default
// every descriptor is counted on its own (envoy: one pipeline per Redis),
// so a request over its per-second limit still spends the minute limit;
// with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT it does not.
func TestPerSecondEnvoyModes(t *testing.T) {
	mainR, psR := testenv.NewRedis(t), testenv.NewRedis(t)
	for _, stop := range []bool{false, true} {
		t.Run(fmt.Sprintf("stop=%v", stop), func(t *testing.T) {
			fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
			s, err := NewService(backendtest.RedisAt(t, mainR.Addr, fake), Options{
				PerSecondBackend: backendtest.RedisAt(t, psR.Addr, fake), Timeout: 5 * time.Second,
				Envoy: EnvoyOptions{Enabled: true, StopIncrementWhenOverLimit: stop},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.SetConfig(mustConfig(t, perSecondYAML), "v1"); err != nil {
				t.Fatal(err)
			}
			decide(t, s, desc(2, "sec", "e"))
			r := decide(t, s, desc(1, "sec", "e"), desc(1, "min", "e"))
			if r.Code != CodeOverLimit || r.Statuses[0].Code != CodeOverLimit || r.Statuses[1].Code != CodeOK {
				t.Fatalf("%+v", r.Statuses)
			}
			want := int64(2) // counted on its own, as envoy's default
			if stop {
				want = 3 // nothing counted
			}
			if got := decide(t, s, desc(0, "min", "e")).Statuses[0].Remaining; got != want {
				t.Errorf("the minute limit after a per-second denial: remaining %d, want %d", got, want)
			}
		})
	}
}

// TestPerSecondLocalCache: the local over-limit cache answers a per-second
// denial it holds without a store call, so even while the per-second store
// is down; a miss goes to the store (and gets the failure mode).
func TestPerSecondLocalCache(t *testing.T) {
	_, psR, mainB, psB, _ := openTwoStores(t)
	s, err := NewService(mainB, Options{PerSecondBackend: psB, LocalCacheBytes: 1 << 20,
		Timeout: 5 * time.Second, PerSecondTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// sec: two a second; a denial is cached for the rest of the second.
	if err := s.SetConfig(mustConfig(t, perSecondYAML), "v1"); err != nil {
		t.Fatal(err)
	}
	// The denial must still be cached when it is asked again with the
	// store down: all three calls in one second. A busy machine can push
	// them into the next: then the attempt is made again on a new key.
	for attempt := 0; ; attempt++ {
		if attempt == 20 {
			t.Fatal("20 attempts did not fit three decisions into one second")
		}
		for time.Now().Nanosecond() >= int(200*time.Millisecond) {
			time.Sleep(10 * time.Millisecond) // start early in a second
		}
		second := time.Now().Truncate(time.Second)
		key := fmt.Sprint("lc", attempt)
		decide(t, s, desc(2, "sec", key))
		r := decide(t, s, desc(1, "sec", key))
		if !time.Now().Truncate(time.Second).Equal(second) {
			continue
		}
		if r.Code != CodeOverLimit || r.Failed {
			t.Fatalf("over the limit: %+v", r)
		}
		if err := psR.Pause(); err != nil {
			t.Fatal(err)
		}
		r = decide(t, s, desc(1, "sec", key))
		late := !time.Now().Truncate(time.Second).Equal(second)
		if err := psR.Resume(); err != nil {
			t.Fatal(err)
		}
		if late {
			continue
		}
		if r.Code != CodeOverLimit || r.Failed {
			t.Fatalf("a cached per-second denial with the per-second store down: %+v", r)
		}
		break
	}
	if err := psR.Pause(); err != nil {
		t.Fatal(err)
	}
	defer psR.Resume()
	if r := decide(t, s, desc(1, "sec", "other")); !r.Failed {
		t.Fatalf("a miss with the per-second store down: %+v, want the failure mode", r)
	}
}

// TestPerSecondEnvoyEachStoreDown: envoy's default mode (each descriptor on
// its own) under --failure-mode allow with the per-second store down: the
// per-second descriptors are answered OK, the main store's still counted.
func TestPerSecondEnvoyEachStoreDown(t *testing.T) {
	_, psR, mainB, psB, _ := openTwoStores(t)
	s, err := NewService(mainB, Options{PerSecondBackend: psB, FailureMode: FailOpen,
		Timeout: 5 * time.Second, PerSecondTimeout: 50 * time.Millisecond,
		Envoy: EnvoyOptions{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetConfig(mustConfig(t, perSecondYAML), "v1"); err != nil {
		t.Fatal(err)
	}
	if err := psR.Pause(); err != nil {
		t.Fatal(err)
	}
	defer psR.Resume()
	for i := range 3 {
		r := decide(t, s, desc(1, "sec", "x"), desc(1, "bucket", "x"), desc(1, "min", "x"))
		if !r.Failed || r.Code != CodeOK || r.Statuses[2].Remaining != int64(2-i) {
			t.Fatalf("request %d: %+v; want OK with the minute limit counted (remaining %d)", i, r, 2-i)
		}
	}
	// The fourth request is over the minute limit, whatever the per-second store.
	if r := decide(t, s, desc(1, "sec", "x"), desc(1, "min", "x")); r.Code != CodeOverLimit || r.Statuses[1].Code != CodeOverLimit {
		t.Fatalf("over the minute limit with the per-second store down: %+v", r)
	}
}

// TestPerSecondStoreOnCluster: a per-second store on a Redis Cluster gets
// one breaker per slot range, as a main store does, and decides requests
// spanning slots and both stores.
func TestPerSecondStoreOnCluster(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	cl := backendtest.Cluster(t, fake)
	s, err := NewService(backendtest.Redis(t, fake), Options{PerSecondBackend: cl, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetConfig(mustConfig(t, perSecondYAML), "v1"); err != nil {
		t.Fatal(err)
	}
	if _, total, ok := s.PerSecondStoreHealth(); !ok || total != breaker.SlotRanges {
		t.Fatalf("per-second store on a Cluster: %d breakers, want %d", total, breaker.SlotRanges)
	}
	if _, total := s.StoreHealth(); total != breaker.SlotRanges+1 {
		t.Fatalf("StoreHealth: %d breakers, want %d", total, breaker.SlotRanges+1)
	}
	for i := range 3 {
		r := decide(t, s, desc(1, "sec", "a"), desc(1, "sec", "b"), desc(1, "min", "a"))
		want := CodeOK
		if i == 2 {
			want = CodeOverLimit
		}
		if r.Code != want || r.Failed {
			t.Fatalf("request %d: %+v, want %v", i, r, want)
		}
	}
	if r := decide(t, s, desc(0, "min", "a")); r.Statuses[0].Remaining != 1 {
		t.Fatalf("the minute limit after a per-second denial: remaining %d, want 1", r.Statuses[0].Remaining)
	}
}

// TestPerSecondTracing: with a per-second store a request on both stores
// makes a store span for each, named by floodgate.store_name.
func TestPerSecondTracing(t *testing.T) {
	tp, exp := tracingProvider(t)
	s := newService(t, backend.NewMemory(), Options{PerSecondBackend: backend.NewMemory(), Tracing: TracingOptions{Provider: tp}})
	h := NewHTTPHandler(s, HTTPOptions{})
	post(t, h, "/v1/check", `{"domain":"api","descriptors":[{"user":"tr"},{"path":"/search/x"}]}`)
	var names []string
	for _, sp := range exp.GetSpans() {
		if sp.Name != tracing.SpanStore {
			continue
		}
		v, _ := spanAttr(sp, tracing.AttrStore)
		names = append(names, v.AsString())
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{storeMain, storePerSecond}) {
		t.Fatalf("store spans named %q, want one per store", names)
	}
}
