package rlqs

import (
	"context"
	"math"
	"os"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/server/config"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// testCore is a Core on one memory backend with a configuration of one
// domain, quota, whose store calls go straight to the backend.
type testCore struct {
	cfg *config.Config
	b   backend.Backend
}

func newTestCore(t testing.TB) *testCore {
	t.Helper()
	d, err := config.Parse("quota.yaml", []byte(`domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: tenant
    value: free
    rate_limit: {unlimited: true}
  - key: tenant
    value: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: tenant
    value: trial
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: tenant
    value: tiny
    rate_limit: {unit: second, requests_per_unit: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	b := backend.NewMemory()
	t.Cleanup(func() { b.Close() })
	return &testCore{cfg: &config.Config{Domains: map[string]*config.Domain{d.Name: d}}, b: b}
}

func (c *testCore) Config() *config.Config { return c.cfg }
func (c *testCore) Now() time.Time         { return time.Now() }
func (c *testCore) Store(ctx context.Context, l *config.Limit, entries []config.Entry, fn func(context.Context, backend.Backend, string) error) error {
	return fn(ctx, c.b, l.StateKey(entries))
}
func (c *testCore) StoreFailed(context.Context, string, error) bool { return true }

func (c *testCore) Authorize(context.Context, string) error { return nil }

func bucket(kv ...string) *rlqsv3.BucketId {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &rlqsv3.BucketId{Bucket: m}
}

func usage(id *rlqsv3.BucketId, allowed, denied uint64, elapsed time.Duration) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId: id, NumRequestsAllowed: allowed, NumRequestsDenied: denied, TimeElapsed: durationpb.New(elapsed),
	}
}

// rate is the requests per second a strategy admits at most: a token
// bucket's tokens_per_fill / fill_interval; -1 for allow all, 0 for deny all.
func rate(s *typev3.RateLimitStrategy) float64 {
	switch {
	case s.GetTokenBucket() != nil:
		tb := s.GetTokenBucket()
		return float64(tb.GetTokensPerFill().GetValue()) / tb.GetFillInterval().AsDuration().Seconds()
	case s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL:
		return 0
	}
	return -1
}

// FuzzRLQSReport: any usage report, first or later on its stream, is
// answered or refused with a status, never a panic, and every answer sent
// (one with actions) passes go-control-plane's validation.
func FuzzRLQSReport(f *testing.F) {
	for _, m := range []*rlqsv3.RateLimitQuotaUsageReports{
		{Domain: "quota", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(bucket("tenant", "x"), 5, 3, time.Second)}},
		{Domain: "quota", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(bucket("tenant", "acme", "path", "/a"), math.MaxUint64, math.MaxUint64, -time.Hour)}},
		{Domain: "quota", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: bucket("tenant", "tiny"), TimeElapsed: &durationpb.Duration{Seconds: math.MaxInt64}}}},
		{Domain: "nope"},
		{},
	} {
		data, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, true)
	}
	q := New(newTestCore(f), Options{TTL: time.Second})
	f.Fuzz(func(t *testing.T, data []byte, first bool) {
		m := new(rlqsv3.RateLimitQuotaUsageReports)
		if proto.Unmarshal(data, m) != nil {
			return
		}
		st := &quotaStream{member: "fuzz", buckets: map[string]*quotaBucket{}}
		if !first {
			st.domain = "quota"
		}
		resp, err := q.report(context.Background(), st, m)
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument && c != codes.NotFound && c != codes.ResourceExhausted {
				t.Fatalf("error %v", err)
			}
			return
		}
		if len(resp.GetBucketAction()) == 0 {
			return // not sent
		}
		if err := resp.ValidateAll(); err != nil {
			t.Fatalf("the answer fails validation: %v (%v)", err, resp)
		}
	})
}

// TestTokenBucket: a share becomes a token bucket that admits at most the
// share in any (half-open) window of one unit — fewer than max_tokens plus
// one unit's fill, since Envoy starts a bucket full — in whole seconds;
// under two requests a unit, at most one more.
func TestTokenBucket(t *testing.T) {
	for _, c := range []struct {
		grant, burst int64
		unit         time.Duration
		tokens, held uint32
		fill         time.Duration
		deny         bool
	}{
		{121_250, 12_000, time.Second, 110, 12, time.Second, false},                   // 121.25/s: 12 held, 110 a second (at most 121 in a window)
		{970_000, 89_000, time.Second, 882, 89, time.Second, false},                   // ⌈970/11⌉ held, 882 a second (at most 970)
		{498_500, 1_000, time.Second, 498, 1, time.Second, false},                     // a burst cut short while the fleet has no room
		{100_999, 10_000, time.Second, 91, 10, time.Second, false},                    // 100.999/s: 10 held, 91 a second (at most 100)
		{58_000, 6_000, time.Minute, 53, 6, time.Minute, false},                       // 58 a minute
		{2_000, 1_000, time.Second, 2, 1, time.Second, false},                         // 2/s: the least held in the unit's window
		{1_500, 1_000, time.Second, 90, 1, time.Minute, false},                        // 1.5/s: 90 a minute, one at a time
		{970, 1_000, time.Second, 58, 1, time.Minute, false},                          // 0.97/s: 58 a minute, one at a time
		{10, 1_000, time.Second, 1, 1, 100 * time.Second, false},                      // 0.01/s: under one a minute
		{17, 1_000, time.Second, 1, 1, time.Minute, false},                            // 1.02 a minute
		{15, 1_000, time.Second, 1, 1, 67 * time.Second, false},                       // 0.9 a minute: one per ceil(1000/15) s
		{1_000, 1_000, 365 * 24 * time.Hour, 60, 1, 60 * 365 * 24 * time.Hour, false}, // one a year: 60 per 60 years
		{500, 1_000, 365 * 24 * time.Hour, 30, 1, 60 * 365 * 24 * time.Hour, false},   // half a year: 30 per 60 years
		{1, 1_000, 365 * 24 * time.Hour, 0, 0, 0, true},                               // one per 1000 years: nothing
		// Periods of several units (unit_multiplier): 10 s, and ten years,
		// whose 60 periods would overflow a time.Duration.
		{50_000, 5_000, 10 * time.Second, 46, 5, 10 * time.Second, false},                 // 50 per 10 s
		{5_000, 1_000, 10 * 365 * 24 * time.Hour, 5, 1, 10 * 365 * 24 * time.Hour, false}, // 5 per ten years
		{1_500, 1_000, 10 * 365 * 24 * time.Hour, 1, 1, 210240000 * time.Second, false},   // 1.5 per ten years: one per 6.67 years
		{20, 1_000, 10 * 365 * 24 * time.Hour, 0, 0, 0, true},                             // one per 500 years: nothing
		{0, 0, time.Second, 0, 0, 0, true},
	} {
		s := tokenBucket(c.grant, c.burst, c.unit)
		if c.deny {
			if s.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL {
				t.Errorf("grant %d: %v, want DENY_ALL", c.grant, s)
			}
			continue
		}
		if err := s.ValidateAll(); err != nil {
			t.Errorf("grant %d per %v: %v fails validation: %v", c.grant, c.unit, s, err)
		}
		tb := s.GetTokenBucket()
		if tb.GetTokensPerFill().GetValue() != c.tokens || tb.GetMaxTokens() != c.held || tb.GetFillInterval().AsDuration() != c.fill {
			t.Errorf("grant %d per %v: %v, want %d per %v, %d held", c.grant, c.unit, tb, c.tokens, c.fill, c.held)
		}
		share := float64(c.grant) / quotaScale // per unit
		if got := rate(s) * c.unit.Seconds(); got > share {
			t.Errorf("grant %d per %v: %v per unit, over the share %v", c.grant, c.unit, got, share)
		}
		// What one unit's window admits at most: a full bucket and a unit's
		// fill, less the window's last instant (half-open), in whole requests.
		window := math.Ceil(float64(tb.GetMaxTokens())+rate(s)*c.unit.Seconds()) - 1
		bound := share
		if c.grant < 2*quotaScale {
			bound++ // a bucket holds a token at least
		}
		if window > bound {
			t.Errorf("grant %d per %v: a unit's window admits %v, over %v (the share %v)", c.grant, c.unit, window, bound, share)
		}
		if tb.GetFillInterval().AsDuration()%time.Second != 0 {
			t.Errorf("grant %d per %v: fill interval %v is not whole seconds", c.grant, c.unit, tb.GetFillInterval().AsDuration())
		}
	}
}
