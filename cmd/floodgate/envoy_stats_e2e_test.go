package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestEnvoyCompatStatsd: `floodgate serve --compat envoy` with envoy's stats
// variables sends envoy's statistics to a StatsD of the test's own (UDP,
// with gostats' STATSD_PROTOCOL=udp): within, near and over the limit, a
// shadow_mode rule, the configuration load and, with Redis stopped, a
// redis_error, each with EXTRA_TAGS. The values are envoyproxy/ratelimit's
// (f2fb157, src/limiter/base_limiter.go); counters arrive as deltas and are
// added up here.
func TestEnvoyCompatStatsd(t *testing.T) {
	u := testenv.ListenStatsd(t)

	r := testenv.NewRedis(t)
	const cfg = `domain: stats
descriptors:
  - key: within
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: over
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`
	s := startEnvoyCompat(t, r, envoyRuntime(t, cfg),
		"STATSD_HOST=127.0.0.1", "STATSD_PORT="+strconv.Itoa(u.Port()),
		"STATSD_PROTOCOL=udp", "STATS_FLUSH_INTERVAL=100ms", "EXTRA_TAGS=env:e2e")
	avoidWindowEdge(time.Hour, 5*time.Second)

	s.mustRL(request("stats", entries("within", "a")))
	for range 3 {
		s.rl(request("stats", entries("over", "a")))
	}
	for range 2 {
		s.mustRL(request("stats", entries("shadow", "a")))
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.rl(request("stats", entries("within", "a"))); err == nil {
		t.Fatal("no error with Redis stopped")
	}

	const p = "ratelimit.service.rate_limit.stats."
	want := map[string]uint64{
		"ratelimit.service.config_load_success":                1,
		"ratelimit.service.call.should_rate_limit.redis_error": 1,
		p + "within.total_hits":                                2,
		p + "within.within_limit":                              1,
		p + "over.total_hits":                                  3,
		p + "over.within_limit":                                2,
		p + "over.near_limit":                                  1,
		p + "over.over_limit":                                  1,
		p + "shadow.total_hits":                                2,
		p + "shadow.within_limit":                              1,
		p + "shadow.near_limit":                                1,
		p + "shadow.over_limit":                                1,
		p + "shadow.shadow_mode":                               1,
	}
	got := map[string]uint64{}
	deadline := time.After(10 * time.Second)
	for !maps.Equal(got, want) {
		select {
		case l := <-u.Lines:
			name, value, ok := strings.Cut(strings.TrimSuffix(l, "|c"), ":")
			short, tag, tagged := strings.Cut(name, ".__")
			if !ok || !strings.HasPrefix(name, "ratelimit.") {
				continue
			}
			if !tagged || tag != "env=e2e" {
				t.Fatalf("%q: want the EXTRA_TAGS tag .__env=e2e", l)
			}
			n, err := strconv.ParseUint(value, 10, 64)
			if err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			got[short] += n
		case <-deadline:
			t.Fatalf("StatsD counters:\n%s\nwant:\n%s", statsDump(got), statsDump(want))
		}
	}
}

func statsDump(m map[string]uint64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "%s: %d\n", k, m[k])
	}
	return b.String()
}
