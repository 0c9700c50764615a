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
// added up here. The gRPC server's stats come too (src/metrics): the seven
// ShouldRateLimit calls in ratelimit_server.ShouldRateLimit.total_requests,
// and one response_time timer line each; and the Go runtime's gauges under
// ratelimit.go.
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
	const srv = "ratelimit_server.ShouldRateLimit."
	wantServer := map[string]uint64{srv + "total_requests": 7, srv + "response_time": 7}
	got, gotServer := map[string]uint64{}, map[string]uint64{}
	runtime := false
	deadline := time.After(10 * time.Second)
	for !maps.Equal(got, want) || !maps.Equal(gotServer, wantServer) || !runtime {
		select {
		case l := <-u.Lines:
			name, rest, ok := strings.Cut(l, ":")
			value, kind, _ := strings.Cut(rest, "|")
			short, tag, tagged := strings.Cut(name, ".__")
			if !ok || !strings.HasPrefix(name, "ratelimit") {
				continue
			}
			if !tagged || tag != "env=e2e" {
				t.Fatalf("%q: want the EXTRA_TAGS tag .__env=e2e", l)
			}
			n, err := strconv.ParseUint(value, 10, 64)
			if err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			switch {
			case strings.HasPrefix(short, "ratelimit.go."):
				runtime = runtime || short == "ratelimit.go.numGoroutine" && kind == "g" && n > 0
			case strings.HasPrefix(short, "ratelimit_server.") && kind == "c":
				if !strings.HasSuffix(short, ".total_requests") {
					t.Fatalf("%q: a counter of ratelimit_server is total_requests", l)
				}
				if strings.HasPrefix(short, srv) {
					gotServer[short] += n
				}
			case strings.HasPrefix(short, "ratelimit_server.") && kind == "ms":
				if strings.HasPrefix(short, srv) {
					gotServer[short]++ // one line per call
				}
			case kind == "c":
				got[short] += n
			default:
				t.Fatalf("%q: not a counter", l)
			}
		case <-deadline:
			t.Fatalf("StatsD counters:\n%s\nwant:\n%s\ngRPC server:\n%s\nwant:\n%s\nruntime gauges seen: %v",
				statsDump(got), statsDump(want), statsDump(gotServer), statsDump(wantServer), runtime)
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

// TestEnvoyCompatLocalCacheStats: with LOCAL_CACHE_SIZE_IN_BYTES, the local
// over-limit cache's lookups are sent as envoy's gauges
// ratelimit.localcache.hitCount, missCount and lookupCount, every flush:
// every descriptor with a limit is looked up, a hit is one the cache answers
// OVER_LIMIT. The sequence and the values are envoyproxy/ratelimit's
// (f2fb157, test/integration/integration_test.go, testBasicBaseConfig with
// a local cache), less its one lookup of another domain. With
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, a descriptor the cache holds over
// its limit stops the others of its request being counted (they are read),
// as envoy's.
func TestEnvoyCompatLocalCacheStats(t *testing.T) {
	t.Run("counted each", func(t *testing.T) { testEnvoyLocalCacheStats(t, false) })
	t.Run("stop increment when over limit", func(t *testing.T) { testEnvoyLocalCacheStats(t, true) })
}

func testEnvoyLocalCacheStats(t *testing.T, stop bool) {
	u := testenv.ListenStatsd(t)
	r := testenv.NewRedis(t)
	const cfg = `domain: another
descriptors:
  - key: key2_local
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3_local
    rate_limit: {unit: hour, requests_per_unit: 10}
`
	s := startEnvoyCompat(t, r, envoyRuntime(t, cfg), "LOCAL_CACHE_SIZE_IN_BYTES=1000",
		"STATSD_HOST=127.0.0.1", "STATSD_PORT="+strconv.Itoa(u.Port()),
		"STATSD_PROTOCOL=udp", "STATS_FLUSH_INTERVAL=100ms", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT="+strconv.FormatBool(stop))
	avoidWindowEdge(time.Minute, 15*time.Second)

	// 25 hits of 20 per minute: the 21st is over (the store said so), the
	// next four are answered by the cache.
	for i := range 25 {
		resp := s.mustRL(request("another", entries("key2_local", "a")))
		if i < 20 {
			checkResponse(t, fmt.Sprint("key2 ", i), resp, ok(20, minute, uint32(19-i)))
		} else {
			checkResponse(t, fmt.Sprint("key2 ", i), resp, over(20, minute, 0))
		}
	}
	// 15 requests of two descriptors: key3_local (10 per hour) is over from
	// the 11th, and answered by the cache from the 12th; key2_local ("b")
	// is looked up every time and never over. With stop, key2_local is not
	// counted once key3_local is over: it stays at 10 left.
	for i := range 15 {
		resp := s.mustRL(request("another", entries("key2_local", "b"), entries("key3_local", "b")))
		left2 := uint32(19 - i)
		if stop && i >= 10 {
			left2 = 10
		}
		if i < 10 {
			checkResponse(t, fmt.Sprint("key2+key3 ", i), resp, ok(20, minute, left2), ok(10, hour, uint32(9-i)))
		} else {
			checkResponse(t, fmt.Sprint("key2+key3 ", i), resp, ok(20, minute, left2), over(10, hour, 0))
		}
	}

	// Lookups: 25 + 30; hits: 4 (key2 "a") + 4 (key3 "b"); misses: the rest.
	want := map[string]uint64{
		"ratelimit.localcache.lookupCount": 55,
		"ratelimit.localcache.hitCount":    8,
		"ratelimit.localcache.missCount":   47,
	}
	const p = "ratelimit.service.rate_limit.another."
	wantCounters := map[string]uint64{
		p + "key2_local.over_limit":                  5,
		p + "key2_local.over_limit_with_local_cache": 4,
		p + "key3_local.over_limit":                  5,
		p + "key3_local.over_limit_with_local_cache": 4,
	}
	got, gotCounters := map[string]uint64{}, map[string]uint64{}
	deadline := time.After(10 * time.Second)
	for !maps.Equal(got, want) || !maps.Equal(gotCounters, wantCounters) {
		select {
		case l := <-u.Lines:
			name, rest, ok := strings.Cut(l, ":")
			value, kind, _ := strings.Cut(rest, "|")
			n, err := strconv.ParseUint(value, 10, 64)
			if !ok || err != nil {
				continue
			}
			if _, w := want[name]; w && kind == "g" {
				got[name] = n
			}
			if _, w := wantCounters[name]; w && kind == "c" {
				gotCounters[name] += n
			}
		case <-deadline:
			t.Fatalf("StatsD gauges:\n%s\nwant:\n%s\ncounters:\n%s\nwant:\n%s", statsDump(got), statsDump(want), statsDump(gotCounters), statsDump(wantCounters))
		}
	}
}
