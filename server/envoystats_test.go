package server

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/server/envoystats"
	"github.com/floodgate-dev/floodgate/server/storeurl"
)

// Tests of envoyproxy/ratelimit's StatsD statistics (Options.EnvoyStats),
// received by a StatsD of the test's own on UDP. The expected lines are
// envoy's (f2fb157): its names (src/stats/manager_impl.go), its arithmetic
// (src/limiter/base_limiter.go) and gostats' wire format.

// statsdFor returns Stats sending to u over UDP, flushed by the test.
func statsdFor(t *testing.T, u *testenv.Statsd, dog bool) *envoystats.Stats {
	t.Helper()
	es, err := envoystats.New(envoystats.Options{Host: "127.0.0.1", Port: u.Port(),
		Protocol: "udp", DogStatsD: dog, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { es.Close() })
	return es
}

// expectStats flushes es and compares the lines that arrive at u (those
// under "ratelimit.service.") with want, in any order.
func expectStats(t *testing.T, u *testenv.Statsd, es *envoystats.Stats, want ...string) {
	t.Helper()
	es.Flush()
	u.Expect(t, "ratelimit.service.", want...)
}

const envoyStatsYAML = `domain: stats
descriptors:
  - key: k
    value: within
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: k
    value: near
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: k
    value: over
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: k
    value: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: remote_address
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: unlimited
    rate_limit: {unlimited: true}
`

func envoyStatsService(t *testing.T, b backend.Backend, es *envoystats.Stats, e EnvoyOptions) *Service {
	t.Helper()
	e.Enabled = true
	s, err := NewService(b, Options{Envoy: e, EnvoyStats: es, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func envoyDecide(t *testing.T, s *Service, domain string, ds ...Descriptor) *Response {
	t.Helper()
	r, err := s.Decide(context.Background(), &Request{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestEnvoyStatsDecisions: within, near and over the limit, shadow mode,
// value_to_metric with an address, an unlimited descriptor (no stats), the
// global shadow mode, an unknown domain and the service errors; then the
// next flush sends the deltas only.
func TestEnvoyStatsDecisions(t *testing.T) {
	u := testenv.ListenStatsd(t)
	es := statsdFor(t, u, false)
	s := envoyStatsService(t, backend.NewMemory(), es, EnvoyOptions{ShadowMode: true})
	if err := s.SetConfig(mustConfig(t, envoyStatsYAML), "v1"); err != nil {
		t.Fatal(err)
	}

	envoyDecide(t, s, "stats", desc(1, "k", "within"))
	for range 9 { // the 9th is past 8, NEAR_LIMIT_RATIO (0.8) of 10
		envoyDecide(t, s, "stats", desc(1, "k", "near"))
	}
	// 3 hits on a limit of 2: 1 over, 1 near (past floor(1.6) = 1); then 1
	// over from the limit. SHADOW_MODE answers both OK.
	for _, n := range []int64{3, 1} {
		if r := envoyDecide(t, s, "stats", desc(n, "k", "over")); r.Code != CodeOK || r.Statuses[0].Code != CodeOverLimit {
			t.Fatalf("over with SHADOW_MODE: %v %v", r.Code, r.Statuses[0].Code)
		}
	}
	envoyDecide(t, s, "stats", desc(1, "k", "shadow"))
	if r := envoyDecide(t, s, "stats", desc(1, "k", "shadow")); r.Statuses[0].Code != CodeOK {
		t.Fatalf("shadow_mode: %v", r.Statuses[0].Code)
	}
	envoyDecide(t, s, "stats", desc(2, "remote_address", "10.1.2.3"))
	envoyDecide(t, s, "stats", desc(1, "unlimited", "x"), desc(1, "nothing", "matches"))
	envoyDecide(t, s, "nope", desc(1, "k", "within"), desc(1, "k", "near"))
	if _, err := s.Decide(context.Background(), &Request{Domain: "", Descriptors: []Descriptor{desc(1, "k", "v")}}); err == nil {
		t.Fatal("empty domain: no error")
	}

	const p = "ratelimit.service.rate_limit.stats."
	expectStats(t, u, es,
		"ratelimit.service.config_load_success:1|c",
		p+"k_within.total_hits:1|c",
		p+"k_within.within_limit:1|c",
		p+"k_near.total_hits:9|c",
		p+"k_near.within_limit:9|c",
		p+"k_near.near_limit:1|c",
		p+"k_over.total_hits:4|c",
		p+"k_over.over_limit:2|c",
		p+"k_over.near_limit:1|c",
		"ratelimit.service.global_shadow_mode:2|c",
		p+"k_shadow.total_hits:2|c",
		p+"k_shadow.within_limit:1|c",
		p+"k_shadow.near_limit:1|c",
		p+"k_shadow.over_limit:1|c",
		p+"k_shadow.shadow_mode:1|c",
		p+"remote_address_10_1_2_3.total_hits:2|c",
		p+"remote_address_10_1_2_3.within_limit:2|c",
		"ratelimit.service.rate_limit.nope.domain_not_found:2|c",
		"ratelimit.service.call.should_rate_limit.service_error:1|c",
	)

	// Deltas: only what moved since.
	envoyDecide(t, s, "stats", desc(1, "k", "within"))
	expectStats(t, u, es, p+"k_within.total_hits:1|c", p+"k_within.within_limit:1|c")
}

// TestEnvoyStatsDogStatsD: the same names, as DogStatsD.
func TestEnvoyStatsDogStatsD(t *testing.T) {
	u := testenv.ListenStatsd(t)
	es := statsdFor(t, u, true)
	s := envoyStatsService(t, backend.NewMemory(), es, EnvoyOptions{})
	if err := s.SetConfig(mustConfig(t, envoyStatsYAML), "v1"); err != nil {
		t.Fatal(err)
	}
	envoyDecide(t, s, "stats", desc(3, "k", "over"))
	const p = "ratelimit.service.rate_limit.stats."
	expectStats(t, u, es,
		"ratelimit.service.config_load_success:1|c",
		p+"k_over.total_hits:3|c",
		p+"k_over.over_limit:1|c",
		p+"k_over.near_limit:1|c",
	)
}

// TestEnvoyStatsConfigLoad: a server in envoy compatibility mode started on
// a bad configuration counts config_load_error, then config_load_success
// when it is fixed, and an error again for another bad one.
func TestEnvoyStatsConfigLoad(t *testing.T) {
	u := testenv.ListenStatsd(t)
	es := statsdFor(t, u, false)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	bad := "domain: stats\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 9}\n"
	writeConfig(t, path, bad)
	srv := startServer(t, Config{ConfigPath: dir, ReloadInterval: -1,
		Service: Options{Envoy: EnvoyOptions{Enabled: true}, EnvoyStats: es}})
	expectStats(t, u, es, "ratelimit.service.config_load_error:1|c")
	writeConfig(t, path, envoyStatsYAML)
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	writeConfig(t, path, bad)
	if err := srv.Reload(); err == nil {
		t.Fatal("bad configuration accepted")
	}
	expectStats(t, u, es, "ratelimit.service.config_load_success:1|c", "ratelimit.service.config_load_error:1|c")
}

// TestEnvoyStatsRedisError: a stopped Redis fails the request (envoy's
// default) and counts redis_error, after total_hits (counted before the
// store is asked, as envoy does).
func TestEnvoyStatsRedisError(t *testing.T) {
	r := testenv.NewRedis(t)
	b, c, err := storeurl.Open("redis://"+r.Addr, backendtest.UniquePrefix(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	u := testenv.ListenStatsd(t)
	es := statsdFor(t, u, false)
	s, err := NewService(b, Options{Envoy: EnvoyOptions{Enabled: true}, EnvoyStats: es, FailureMode: FailError, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetConfig(mustConfig(t, envoyStatsYAML), "v1"); err != nil {
		t.Fatal(err)
	}
	envoyDecide(t, s, "stats", desc(1, "k", "within"))
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decide(context.Background(), &Request{Domain: "stats", Descriptors: []Descriptor{desc(1, "k", "within")}}); err == nil {
		t.Fatal("no error with Redis stopped")
	}
	const p = "ratelimit.service.rate_limit.stats."
	expectStats(t, u, es,
		"ratelimit.service.config_load_success:1|c",
		p+"k_within.total_hits:2|c",
		p+"k_within.within_limit:1|c",
		"ratelimit.service.call.should_rate_limit.redis_error:1|c",
	)
}
