package envoystats

import (
	"testing"
	"time"

	gostats "github.com/lyft/gostats"

	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/server/config"
)

// TestDecidedArithmetic replays envoyproxy/ratelimit's
// test/redis/fixed_cache_impl_test.go TestNearLimit: a limit, the counter
// after the increment and the hits, and the counters it expects.
func TestDecidedArithmetic(t *testing.T) {
	s := newStats(newMemStore(), Options{NearLimitRatio: 0.8})
	type counts struct{ within, near, over uint64 }
	for _, c := range []struct {
		limit       uint32
		steps       [][2]uint64 // after, hits
		want        counts
		description string
	}{
		{15, [][2]uint64{{11, 1}}, counts{1, 0, 0}, "under the threshold"},
		{15, [][2]uint64{{11, 1}, {13, 1}}, counts{2, 1, 0}, "past the threshold"},
		{15, [][2]uint64{{11, 1}, {13, 1}, {16, 1}}, counts{2, 1, 1}, "over, from the limit"},
		{20, [][2]uint64{{5, 3}}, counts{3, 0, 0}, "hits_addend under"},
		{8, [][2]uint64{{7, 2}}, counts{2, 1, 0}, "hits_addend across the threshold (6)"},
		{20, [][2]uint64{{19, 3}}, counts{3, 3, 0}, "hits_addend from the threshold"},
		{20, [][2]uint64{{22, 3}}, counts{0, 1, 2}, "hits_addend across the limit"},
		{20, [][2]uint64{{22, 7}}, counts{0, 4, 2}, "hits_addend across both"},
		{20, [][2]uint64{{27, 5}}, counts{0, 0, 5}, "already over"},
	} {
		r := s.Rule("domain." + c.description)
		for _, st := range c.steps {
			s.Decided(r, c.limit, st[0]-st[1], st[0], st[1], false, false)
		}
		got := counts{r.WithinLimit.Value(), r.NearLimit.Value(), r.OverLimit.Value()}
		if got != c.want {
			t.Errorf("%s: within, near, over %v, want %v", c.description, got, c.want)
		}
	}

	r := s.Rule("domain.shadow")
	s.Decided(r, 10, 9, 12, 3, true, false)
	if o, sh := r.OverLimit.Value(), r.ShadowMode.Value(); o != 2 || sh != 2 {
		t.Errorf("shadow: over_limit %d, shadow_mode %d, want 2, 2", o, sh)
	}
	r = s.Rule("domain.local")
	s.Decided(r, 10, 0, 0, 2, false, true)
	if o, l := r.OverLimit.Value(), r.OverLimitWithLocalCache.Value(); o != 2 || l != 2 {
		t.Errorf("local cache: over_limit %d, over_limit_with_local_cache %d, want 2, 2", o, l)
	}
}

func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{
		"domain.key_value":              "domain.key_value",
		"domain.remote_address_1.2.3.4": "domain.remote_address_1_2_3_4",
		"domain.a:b|c":                  "domain.a_b_c",
	} {
		if got := Sanitize(in); got != want {
			t.Errorf("Sanitize(%q) = %q, want %q", in, got, want)
		}
	}
	if got := OverrideKey("d", []config.Entry{{Key: "k", Value: "v"}, {Key: "e"}}); got != "d.k_v.e" {
		t.Errorf("OverrideKey = %q", got)
	}
}

// TestStatsdUDP sends over plain StatsD (gostats' sink, STATSD_PROTOCOL=udp):
// envoy's names, deltas per flush, EXTRA_TAGS in the name.
func TestStatsdUDP(t *testing.T) {
	u, s := listening(t, Options{Protocol: "udp", FlushInterval: time.Hour, ExtraTags: map[string]string{"env": "test"}})
	r := s.Rule("mongo_cps.database_users")
	r.TotalHits.Add(3)
	s.Decided(r, 2, 0, 3, 3, false, false)
	s.ConfigLoadSuccess.Inc()
	s.Flush()
	u.Expect(t, "ratelimit.service.",
		"ratelimit.service.rate_limit.mongo_cps.database_users.total_hits.__env=test:3|c",
		"ratelimit.service.rate_limit.mongo_cps.database_users.over_limit.__env=test:1|c",
		"ratelimit.service.rate_limit.mongo_cps.database_users.near_limit.__env=test:1|c",
		"ratelimit.service.config_load_success.__env=test:1|c")

	// The next flush sends what changed since, only.
	r.TotalHits.Inc()
	s.Flush()
	u.Expect(t, "ratelimit.service.", "ratelimit.service.rate_limit.mongo_cps.database_users.total_hits.__env=test:1|c")
}

// TestGRPCMethodUDP: the gRPC server's stats, under ratelimit_server with
// EXTRA_TAGS, named as envoyproxy/ratelimit's interceptor names them
// (src/metrics/utils.go splitMethodName): the method after the service,
// "unknown" without one. A timer is sent at once, in whole milliseconds.
func TestGRPCMethodUDP(t *testing.T) {
	u, s := listening(t, Options{Protocol: "udp", FlushInterval: time.Hour, ExtraTags: map[string]string{"env": "test"}})
	m := s.GRPCMethod("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
	if again := s.GRPCMethod("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"); again != m {
		t.Error("GRPCMethod returned two *Method for one method")
	}
	m.TotalRequests.Inc()
	m.TotalRequests.Inc()
	m.Done(1500 * time.Microsecond)
	m.Done(12 * time.Millisecond)
	s.GRPCMethod("/grpc.health.v1.Health/Check").TotalRequests.Inc()
	s.GRPCMethod("nonsense").TotalRequests.Inc()
	s.Flush()
	u.Expect(t, "ratelimit_server.",
		"ratelimit_server.ShouldRateLimit.response_time.__env=test:1|ms",
		"ratelimit_server.ShouldRateLimit.response_time.__env=test:12|ms",
		"ratelimit_server.ShouldRateLimit.total_requests.__env=test:2|c",
		"ratelimit_server.Check.total_requests.__env=test:1|c",
		"ratelimit_server.unknown.total_requests.__env=test:1|c")
	var nilStats *Stats
	nilStats.GRPCMethod("/a/b").Done(time.Second) // a nil Stats records nothing
}

// TestDogStatsdUDP sends DogStatsD: EXTRA_TAGS as tags.
func TestDogStatsdUDP(t *testing.T) {
	u, s := listening(t, Options{DogStatsD: true, FlushInterval: time.Hour, ExtraTags: map[string]string{"env": "test", "commit": "abc"}})
	s.RedisError.Inc()
	s.Flush()
	u.Expect(t, "ratelimit.service.", "ratelimit.service.call.should_rate_limit.redis_error:1|c|#commit:abc,env:test")
}

// TestDisabled sends nothing, and Close returns.
func TestDisabled(t *testing.T) {
	u, s := listening(t, Options{Disabled: true, Protocol: "udp", FlushInterval: time.Millisecond})
	s.ServiceError.Inc()
	time.Sleep(20 * time.Millisecond)
	s.Close()
	select {
	case l := <-u.Lines:
		t.Fatalf("sent %q", l)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestFlushInterval(t *testing.T) {
	u, s := listening(t, Options{Protocol: "udp", FlushInterval: 50 * time.Millisecond})
	s.GlobalShadowMode.Add(2)
	u.Expect(t, "ratelimit.service.", "ratelimit.service.global_shadow_mode:2|c")
}

func TestParseExtraTags(t *testing.T) {
	m, err := ParseExtraTags("a:1,b:2")
	if err != nil || len(m) != 2 || m["a"] != "1" || m["b"] != "2" {
		t.Fatalf("%v %v", m, err)
	}
	if _, err := ParseExtraTags("a"); err == nil {
		t.Fatal("no error for a")
	}
}

func newMemStore() gostats.Store { return gostats.NewStore(gostats.NewNullSink(), false) }

// listening returns a StatsD listener and Stats made with o sending to it
// (Host and Port set here), closed when the test ends (Close is
// idempotent).
func listening(t *testing.T, o Options) (*testenv.Statsd, *Stats) {
	t.Helper()
	u := testenv.ListenStatsd(t)
	o.Host, o.Port = "127.0.0.1", u.Port()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return u, s
}
