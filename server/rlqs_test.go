package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlqs "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

const quotaYAML = `domain: quota
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
`

// newQuotaService returns a Service on b with quotaYAML and assignments of
// ttl (at least).
func newQuotaService(t testing.TB, b backend.Backend, ttl time.Duration) *Service {
	t.Helper()
	// A store timeout far above a loaded machine's worst: a bucket not sized
	// in time gets no action, which the tests would take for a failure.
	return quotaService(t, b, Options{Timeout: 2 * time.Second, Quota: QuotaOptions{TTL: ttl, SweepInterval: 100 * time.Millisecond}})
}

// quotaService returns a Service on b with opts and quotaYAML.
func quotaService(t testing.TB, b backend.Backend, opts Options) *Service {
	t.Helper()
	s, err := NewService(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetConfig(mustConfig(t, quotaYAML), "v1"); err != nil {
		t.Fatal(err)
	}
	return s
}

// goRedisBackend returns a backend with opts on the Redis at addr through
// go-redis (ContextTimeoutEnabled, as a floodgate server's).
func goRedisBackend(t testing.TB, addr string, opts ...backend.Option) backend.Backend {
	t.Helper()
	gc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { gc.Close() })
	b, err := backend.NewRedis(gc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// startRLQS serves s's quota service on a free local port and returns a
// client of it: go-control-plane's generated client, as a data plane uses.
func startRLQS(t testing.TB, s *Service) rlqs.RateLimitQuotaServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("cannot listen for the RLQS server: %v", err)
	}
	g := grpc.NewServer()
	rlqs.RegisterRateLimitQuotaServiceServer(g, NewRLQS(s))
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rlqs.NewRateLimitQuotaServiceClient(cc)
}

type quotaClient = grpc.BidiStreamingClient[rlqs.RateLimitQuotaUsageReports, rlqs.RateLimitQuotaResponse]

func openQuota(t testing.TB, c rlqs.RateLimitQuotaServiceClient) (quotaClient, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.StreamRateLimitQuotas(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return st, cancel
}

func bucket(kv ...string) *rlqs.BucketId {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &rlqs.BucketId{Bucket: m}
}

func usage(id *rlqs.BucketId, allowed, denied uint64, elapsed time.Duration) *rlqs.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqs.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId: id, NumRequestsAllowed: allowed, NumRequestsDenied: denied, TimeElapsed: durationpb.New(elapsed),
	}
}

// exchange sends one report and returns the answer, failing the test after
// 5 s without one.
func exchange(t testing.TB, st quotaClient, domain string, us ...*rlqs.RateLimitQuotaUsageReports_BucketQuotaUsage) (*rlqs.RateLimitQuotaResponse, error) {
	t.Helper()
	// A Send that finds the stream already ended by the server (it refused
	// the stream before the report went out: a busy machine) returns io.EOF;
	// Recv then returns the stream's status, as grpc-go documents.
	if err := st.Send(&rlqs.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: us}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	type res struct {
		r   *rlqs.RateLimitQuotaResponse
		err error
	}
	c := make(chan res, 1)
	go func() { r, err := st.Recv(); c <- res{r, err} }()
	select {
	case r := <-c:
		return r.r, r.err
	case <-time.After(5 * time.Second):
		t.Fatal("no answer to a usage report within 5 s")
		return nil, nil
	}
}

// bucketKey names a bucket by its pairs, sorted.
func bucketKey(id *rlqs.BucketId) string {
	keys := slices.Sorted(maps.Keys(id.GetBucket()))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%q=%q|", k, id.GetBucket()[k])
	}
	return b.String()
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

// TestRLQSAssignments: one data plane's buckets get the strategy of the
// limit their pairs match, in any key order; unmatched buckets are
// abandoned. Every answer passes go-control-plane's validation.
func TestRLQSAssignments(t *testing.T) {
	s := newQuotaService(t, backend.NewMemory(), 2*time.Second)
	st, _ := openQuota(t, startRLQS(t, s))
	type want struct {
		abandon bool
		rate    float64 // per second; -1 allow all
		fill    time.Duration
		tokens  uint32
		held    uint32 // max_tokens; 0: tokens
	}
	cases := []struct {
		id   *rlqs.BucketId
		want want
	}{
		// Alone: the whole budget, 99.7% of 1000/s (the rest is the reserve):
		// ⌈997/11⌉ = 91 held and 997 + 1 − 91 = 907 a second filled (a
		// second's window, half-open, admits fewer than 91 + 907).
		{bucket("tenant", "x"), want{rate: 907, fill: time.Second, tokens: 907, held: 91}},
		// Two levels, the bucket's keys in either order; a minute's limit.
		// Its reserve is two requests (the least): 58 a minute, 6 held, 53
		// filled.
		{bucket("path", "/a", "tenant", "acme"), want{rate: 53.0 / 60, fill: time.Minute, tokens: 53, held: 6}},
		{bucket("tenant", "free"), want{rate: -1}},
		{bucket("tenant", "trial"), want{rate: -1}}, // shadow mode
		{bucket("tenant", "blocked"), want{rate: 0}},
		// A share under one request per unit: counted per 60 units, one token at a time.
		// Its reserve is a quarter of the limit (two requests would be all).
		{bucket("tenant", "tiny"), want{rate: 45.0 / 60, fill: time.Minute, tokens: 45, held: 1}},
		{bucket("tenant", "acme"), want{abandon: true}}, // the first level has no limit
		{bucket("user", "bob"), want{abandon: true}},
		{bucket("tenant", "x", "user", "bob"), want{abandon: true}}, // deeper than the configuration
	}
	var us []*rlqs.RateLimitQuotaUsageReports_BucketQuotaUsage
	for _, c := range cases {
		us = append(us, usage(c.id, 300, 200, time.Second))
	}
	resp, err := exchange(t, st, "quota", us...)
	if err != nil {
		t.Fatal(err)
	}
	if err := resp.ValidateAll(); err != nil {
		t.Fatalf("the answer fails go-control-plane's validation: %v", err)
	}
	if len(resp.BucketAction) != len(cases) {
		t.Fatalf("%d actions for %d buckets", len(resp.BucketAction), len(cases))
	}
	for i, c := range cases {
		a := resp.BucketAction[i]
		if got := bucketKey(a.GetBucketId()); got != bucketKey(c.id) {
			t.Errorf("action %d is for %s, want %s (the report's order)", i, got, bucketKey(c.id))
			continue
		}
		if c.want.abandon {
			if a.GetAbandonAction() == nil {
				t.Errorf("%v: %v, want abandon_action", c.id.Bucket, a)
			}
			continue
		}
		qa := a.GetQuotaAssignmentAction()
		if qa == nil {
			t.Errorf("%v: %v, want an assignment", c.id.Bucket, a)
			continue
		}
		if got := qa.GetAssignmentTimeToLive().AsDuration(); got != 2*time.Second {
			t.Errorf("%v: time to live %v, want 2s", c.id.Bucket, got)
		}
		if got := rate(qa.GetRateLimitStrategy()); got != c.want.rate {
			t.Errorf("%v: %v/s, want %v/s (%v)", c.id.Bucket, got, c.want.rate, qa.GetRateLimitStrategy())
		}
		if tb := qa.GetRateLimitStrategy().GetTokenBucket(); tb != nil {
			held := c.want.held
			if held == 0 {
				held = c.want.tokens
			}
			if tb.GetFillInterval().AsDuration() != c.want.fill || tb.GetTokensPerFill().GetValue() != c.want.tokens || tb.GetMaxTokens() != held {
				t.Errorf("%v: token bucket %v, want %d tokens per %v, %d held", c.id.Bucket, tb, c.want.tokens, c.want.fill, held)
			}
		}
	}

	// The domain comes in the first report only; the same assignment again
	// is a refresh, with a time to live from the reporting interval.
	resp, err = exchange(t, st, "", usage(bucket("tenant", "x"), 400, 0, 3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	qa := resp.GetBucketAction()[0].GetQuotaAssignmentAction()
	if got := rate(qa.GetRateLimitStrategy()); got != 907 {
		t.Errorf("second report: %v/s, want 907/s", got)
	}
	if got := qa.GetAssignmentTimeToLive().AsDuration(); got != 5*time.Second {
		t.Errorf("second report, 3 s after the first: time to live %v, want 5s (1.5 intervals, whole seconds)", got)
	}
}

// TestRLQSBadInput: malformed streams end with a status naming the problem.
func TestRLQSBadInput(t *testing.T) {
	c := startRLQS(t, newQuotaService(t, backend.NewMemory(), time.Second))
	for _, tc := range []struct {
		name    string
		reports []*rlqs.RateLimitQuotaUsageReports
		code    codes.Code
		msg     string
	}{
		{"no domain", []*rlqs.RateLimitQuotaUsageReports{{BucketQuotaUsages: []*rlqs.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(bucket("tenant", "x"), 1, 0, 0)}}},
			codes.InvalidArgument, "domain is empty"},
		{"unknown domain", []*rlqs.RateLimitQuotaUsageReports{{Domain: "nope"}},
			codes.NotFound, `domain "nope" is not configured`},
		{"another domain", []*rlqs.RateLimitQuotaUsageReports{{Domain: "quota"}, {Domain: "other"}},
			codes.InvalidArgument, `"other" differs from the stream's, "quota"`},
		{"empty bucket", []*rlqs.RateLimitQuotaUsageReports{{Domain: "quota", BucketQuotaUsages: []*rlqs.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(bucket("tenant", "x"), 1, 0, 0), {}}}},
			codes.InvalidArgument, "bucket_quota_usages[1].bucket_id is empty"},
		{"empty key", []*rlqs.RateLimitQuotaUsageReports{{Domain: "quota", BucketQuotaUsages: []*rlqs.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(bucket("", "x"), 1, 0, 0)}}},
			codes.InvalidArgument, "bucket_quota_usages[0].bucket_id has an empty key"},
		{"empty value", []*rlqs.RateLimitQuotaUsageReports{{Domain: "quota", BucketQuotaUsages: []*rlqs.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(bucket("tenant", ""), 1, 0, 0)}}},
			codes.InvalidArgument, `bucket_quota_usages[0].bucket_id: the value of "tenant" is empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _ := openQuota(t, c)
			for _, r := range tc.reports {
				if err := st.Send(r); err != nil {
					break // the server ended the stream: Recv tells why
				}
			}
			for {
				_, err := st.Recv()
				if err == nil {
					continue // an answer to a valid report before the bad one
				}
				s, _ := status.FromError(err)
				if s.Code() != tc.code || !strings.Contains(s.Message(), tc.msg) {
					t.Fatalf("got %v %q, want %v containing %q", s.Code(), s.Message(), tc.code, tc.msg)
				}
				return
			}
		})
	}
}

// TestRLQSNoConfig: before any configuration, a stream is Unavailable.
func TestRLQSNoConfig(t *testing.T) {
	s, err := NewService(backend.NewMemory(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := openQuota(t, startRLQS(t, s))
	_, err = exchange(t, st, "quota", usage(bucket("tenant", "x"), 1, 0, 0))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want Unavailable", err)
	}
}

// TestRLQSAbandonQuiet: a bucket its data plane stops reporting, on an open
// stream, is abandoned when twice its assignment's time to live has passed,
// on the store's clock.
func TestRLQSAbandonQuiet(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	start := clk.Now()
	st, _ := openQuota(t, startRLQS(t, newQuotaService(t, backend.NewMemory(backend.WithClock(clk)), time.Second)))
	resp, err := exchange(t, st, "quota", usage(bucket("tenant", "x"), 5, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetBucketAction()[0].GetQuotaAssignmentAction() == nil {
		t.Fatalf("no assignment: %v", resp)
	}
	got := make(chan *rlqs.RateLimitQuotaResponse, 1)
	go func() {
		r, _ := st.Recv() // nil when the stream ends: a failure below
		got <- r
	}()
	clk.Set(start.Add(1900 * time.Millisecond))
	select {
	case r := <-got:
		t.Fatalf("1.9 s after the report of a bucket whose assignment lasts 1 s: %v, want nothing before 2 s", r)
	case <-time.After(500 * time.Millisecond): // five sweeps
	}
	clk.Set(start.Add(2 * time.Second))
	select {
	case r := <-got:
		if len(r.GetBucketAction()) != 1 || r.GetBucketAction()[0].GetAbandonAction() == nil {
			t.Fatalf("got %v, want abandon_action", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not abandoned 2 s after its last report (twice its time to live)")
	}
}

// TestRLQSStoreDown: with the store stopped, RLQS's store calls go through
// the store's circuit breakers and count in its error metrics, as RLS's do,
// and each bucket is answered by the failure mode (failAction): a bucket
// whose assignment is live gets no action (Envoy keeps it); a new bucket, or
// one whose assignment has expired, gets the failure mode's blanket rule
// (none under FailError). The stream goes on, and gets its shares back once
// the store is.
func TestRLQSStoreDown(t *testing.T) {
	for _, c := range []struct {
		mode  FailureMode
		want  typev3.RateLimitStrategy_BlanketRule
		blank bool // no action: Envoy's own behaviours decide
	}{
		{FailOpen, typev3.RateLimitStrategy_ALLOW_ALL, false},
		{FailClosed, typev3.RateLimitStrategy_DENY_ALL, false},
		{FailError, 0, true},
	} {
		t.Run(c.mode.String(), func(t *testing.T) {
			t.Parallel()
			r := testenv.NewRedis(t)
			clk := clock.NewFake(time.Unix(1_800_000_000, 0))
			start := clk.Now()
			m := NewMetrics()
			s := quotaService(t, goRedisBackend(t, r.Addr, backend.WithPrefix(backendtest.UniquePrefix()), backend.WithClock(clk)), Options{
				Timeout: 200 * time.Millisecond, FailureMode: c.mode, Metrics: m,
				// x's and y's calls, sized together, fail together: one
				// failure event, which opens the breaker. Its first probe
				// waits longer than the outage's reports take on a loaded
				// machine.
				Breaker: BreakerOptions{Failures: 1, Probe: 2 * time.Second, Cooldown: 2 * time.Second},
			})
			st, _ := openQuota(t, startRLQS(t, s))
			x, y, bob := bucket("tenant", "x"), bucket("tenant", "y"), bucket("user", "bob")
			resp, err := exchange(t, st, "quota", usage(x, 5, 0, time.Second))
			if err != nil {
				t.Fatal(err)
			}
			qa := resp.GetBucketAction()[0].GetQuotaAssignmentAction()
			if got := rate(qa.GetRateLimitStrategy()); got != 907 {
				t.Fatalf("with Redis up: %v/s, want 907/s", got)
			}
			ttl := qa.GetAssignmentTimeToLive().AsDuration()

			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
			// actions returns resp's actions by bucket key.
			actions := func(resp *rlqs.RateLimitQuotaResponse) map[string]*rlqs.RateLimitQuotaResponse_BucketAction {
				out := map[string]*rlqs.RateLimitQuotaResponse_BucketAction{}
				for _, a := range resp.GetBucketAction() {
					out[bucketKey(a.GetBucketId())] = a
				}
				return out
			}
			// checkBlanket checks the failure mode's answer for id in got.
			checkBlanket := func(when string, got map[string]*rlqs.RateLimitQuotaResponse_BucketAction, id *rlqs.BucketId) {
				t.Helper()
				a := got[bucketKey(id)]
				if c.blank {
					if a != nil {
						t.Errorf("%s: %v, want no action", when, a)
					}
					return
				}
				qa := a.GetQuotaAssignmentAction()
				if qa.GetRateLimitStrategy().GetBlanketRule() != c.want || qa.GetRateLimitStrategy().GetTokenBucket() != nil {
					t.Errorf("%s: %v, want blanket_rule %v", when, a, c.want)
				} else if qa.GetAssignmentTimeToLive().AsDuration() != ttl {
					t.Errorf("%s: time to live %v, want %v", when, qa.GetAssignmentTimeToLive().AsDuration(), ttl)
				}
			}
			// x's assignment is live: no action; y, new: the failure mode's;
			// bob, unmatched, is abandoned (no store call).
			resp, err = exchange(t, st, "", usage(x, 5, 0, time.Second), usage(y, 1, 0, 0), usage(bob, 1, 0, 0))
			if err != nil {
				t.Fatalf("with Redis stopped: %v, want the stream to go on", err)
			}
			got := actions(resp)
			if a := got[bucketKey(x)]; a != nil {
				t.Errorf("with Redis stopped, a live assignment: %v, want no action (Envoy keeps it)", a)
			}
			checkBlanket("with Redis stopped, a new bucket", got, y)
			if got[bucketKey(bob)].GetAbandonAction() == nil {
				t.Errorf("with Redis stopped, the unmatched bucket: %v, want abandon_action", got[bucketKey(bob)])
			}
			// Once x's assignment has expired: the failure mode's, the call
			// refused by the open breaker.
			clk.Set(start.Add(ttl))
			resp, err = exchange(t, st, "", usage(x, 5, 0, time.Second), usage(bob, 1, 0, 0))
			if err != nil {
				t.Fatal(err)
			}
			checkBlanket("with Redis stopped, an expired assignment", actions(resp), x)

			failed := metricValue(t, m, "floodgate_backend_errors_total", "reason", "error", "store", "main") +
				metricValue(t, m, "floodgate_backend_errors_total", "reason", "timeout", "store", "main")
			if failed != 2 {
				t.Errorf("store errors and timeouts counted: %v, want 2 (x and y)", failed)
			}
			if got := metricValue(t, m, "floodgate_backend_errors_total", "reason", "breaker_open", "store", "main"); got != 1 {
				t.Errorf("calls the open breaker refused: %v, want 1", got)
			}
			if got := metricValue(t, m, "floodgate_breaker_open", "store", "main"); got != 1 {
				t.Errorf("floodgate_breaker_open = %v, want 1", got)
			}
			if got := metricValue(t, m, "floodgate_failure_mode_total", "mode", c.mode.String()); got != 3 {
				t.Errorf("buckets answered by the failure mode: %v, want 3", got)
			}
			unsized := 1.0 // x while live
			if c.blank {
				unsized = 3
			}
			if got := metricValue(t, m, "floodgate_rlqs_actions_total", "domain", "quota", "action", "unsized"); got != unsized {
				t.Errorf("buckets without an action: %v, want %v", got, unsized)
			}

			// Back: once the breaker lets a probe through, x has its share again.
			if err := r.Restart(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				clk.Set(clk.Now().Add(time.Second))
				resp, err := exchange(t, st, "", usage(x, 5, 0, time.Second), usage(bob, 1, 0, 0))
				if err != nil {
					t.Fatal(err)
				}
				if got := rate(actions(resp)[bucketKey(x)].GetQuotaAssignmentAction().GetRateLimitStrategy()); got == 907 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Redis restarted 20 s ago: %v, want x's share, 907/s", resp)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// TestRLQSServer: Server serves RLQS beside RLS on its gRPC port, behind
// the bearer token, reports it in the health service, and ends its streams
// on shutdown instead of waiting for them.
func TestRLQSServer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "quota.yaml")
	writeConfig(t, path, quotaYAML)
	srv, err := New(Config{ConfigPath: path, Backend: backend.NewMemory(), GRPCAddr: "127.0.0.1:0", Token: "tok", ShutdownTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	cc, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := rlqs.NewRateLimitQuotaServiceClient(cc)

	hc, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health of the quota service: %v %v", hc, err)
	}

	st, err := c.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exchange(t, st, "quota", usage(bucket("tenant", "x"), 1, 0, 0)); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without the token: %v, want Unauthenticated", err)
	}

	st, err = c.StreamRateLimitQuotas(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer tok"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := exchange(t, st, "quota", usage(bucket("tenant", "x"), 1, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if got := rate(resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy()); got != 907 {
		t.Fatalf("with the token: %v/s, want 907/s (%v)", got, resp)
	}
	if _, err := exchange(t, st, "", usage(bucket("user", "bob"), 1, 0, time.Second)); err != nil {
		t.Fatal(err)
	}
	m := srv.Metrics()
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"floodgate_rlqs_streams", nil, 1},
		{"floodgate_rlqs_actions_total", []string{"domain", "quota", "action", "assign"}, 1},
		{"floodgate_rlqs_actions_total", []string{"domain", "quota", "action", "abandon"}, 1},
		{"floodgate_requests_total", []string{"api", "rlqs", "code", "OK"}, 2},
		{"floodgate_requests_total", []string{"api", "grpc", "code", "unauthorized"}, 1},
	} {
		if got := metricValue(t, m, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}

	start := time.Now()
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server's shutdown waits for the open quota stream")
	}
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("the open stream at shutdown: %v, want Unavailable", err)
	}
	t.Logf("shutdown with an open quota stream took %v", time.Since(start).Round(time.Millisecond))
}

// TestRLQSReload: each report is matched against the configuration of the
// moment: a changed limit changes the share, a removed domain abandons the
// stream's buckets.
func TestRLQSReload(t *testing.T) {
	s := newQuotaService(t, backend.NewMemory(), time.Second)
	st, _ := openQuota(t, startRLQS(t, s))
	resp, err := exchange(t, st, "quota", usage(bucket("tenant", "x"), 5, 0, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := rate(resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy()); got != 907 {
		t.Fatalf("%v/s, want 907/s", got)
	}
	if err := s.SetConfig(mustConfig(t, strings.Replace(quotaYAML, "requests_per_unit: 1000", "requests_per_unit: 2000", 1)), "v2"); err != nil {
		t.Fatal(err)
	}
	resp, err = exchange(t, st, "", usage(bucket("tenant", "x"), 5, 0, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := rate(resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy()); got != 1731 {
		// The share grows at once by what its old bucket's burst leaves
		// (a new bucket starts full): 2000 − 6 (reserve) − 91 = 1903, of which
		// ⌈1903/11⌉ = 173 held.
		t.Fatalf("after the limit doubled: %v/s, want 1731/s (1903/s and one, less the 173 held)", got)
	}
	if err := s.SetConfig(mustConfig(t, "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), "v3"); err != nil {
		t.Fatal(err)
	}
	resp, err = exchange(t, st, "", usage(bucket("tenant", "x"), 5, 0, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetBucketAction()[0].GetAbandonAction() == nil {
		t.Fatalf("after the domain was removed: %v, want abandon_action", resp)
	}
}

// TestRLQSManyBuckets: a report of many buckets, sized concurrently on
// Redis, is answered in the report's order, every bucket with its share.
func TestRLQSManyBuckets(t *testing.T) {
	st, _ := openQuota(t, startRLQS(t, newQuotaService(t, backendtest.Redis(t, nil), time.Second)))
	var us []*rlqs.RateLimitQuotaUsageReports_BucketQuotaUsage
	for i := range 300 {
		us = append(us, usage(bucket("tenant", "t"+strconv.Itoa(i)), 10, 0, time.Second))
	}
	us = append(us, usage(bucket("user", "bob"), 1, 0, time.Second))
	resp, err := exchange(t, st, "quota", us...)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetBucketAction()) != len(us) {
		t.Fatalf("%d actions for %d buckets", len(resp.GetBucketAction()), len(us))
	}
	for i, a := range resp.GetBucketAction() {
		if got, want := bucketKey(a.GetBucketId()), bucketKey(us[i].GetBucketId()); got != want {
			t.Fatalf("action %d is for %s, want %s", i, got, want)
		}
		if i == len(us)-1 {
			if a.GetAbandonAction() == nil {
				t.Errorf("the unmatched bucket: %v, want abandon_action", a)
			}
			continue
		}
		if got := rate(a.GetQuotaAssignmentAction().GetRateLimitStrategy()); got != 907 {
			t.Errorf("bucket %d: %v/s, want 907/s", i, got)
		}
	}
}

// TestRLQSStoreStalled: with the store paused (SIGSTOP: calls hang, none
// fails at once) or answering slower than the service's timeout, the stream
// goes on past the timeout, and a bucket whose assignment is live gets no
// action (Envoy keeps its token bucket, which the store still counts); once
// the store is back, the next reports get the same share again. A store
// slow within the timeout changes nothing: every report gets its share.
func TestRLQSStoreStalled(t *testing.T) {
	for _, c := range []struct {
		name  string
		delay time.Duration // through a proxy; 0: SIGSTOP
		late  bool          // slower than the service's timeout
	}{
		{"paused", 0, true},
		{"slower-than-timeout", 400 * time.Millisecond, true},
		{"within-timeout", 30 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := testenv.NewRedis(t)
			addr := r.Addr
			var p *testenv.Proxy
			if c.delay > 0 {
				p = testenv.NewProxy(t, r.Addr)
				addr = p.Addr()
			}
			stall := func() error {
				if p != nil {
					p.SetDelay(c.delay)
					return nil
				}
				return r.Pause()
			}
			resume := func() error {
				if p != nil {
					p.SetDelay(0)
					return nil
				}
				return r.Resume()
			}
			clk := clock.NewFake(time.Unix(1_800_000_000, 0))
			timeout := 200 * time.Millisecond
			if !c.late {
				// Within the timeout on a busy machine too: the case is
				// about a slow store, not about this machine's load.
				timeout = 2 * time.Second
			}
			s := quotaService(t, goRedisBackend(t, addr, backend.WithPrefix(backendtest.UniquePrefix()), backend.WithClock(clk)), Options{
				Timeout: timeout, FailureMode: FailOpen, Metrics: NewMetrics(),
				Breaker: BreakerOptions{Failures: 1, Probe: 100 * time.Millisecond, Cooldown: 100 * time.Millisecond},
			})
			st, _ := openQuota(t, startRLQS(t, s))
			x, bob := bucket("tenant", "x"), bucket("user", "bob") // bob: unmatched, abandoned without the store
			// strategy returns x's strategy in resp, nil when it has no action.
			strategy := func(resp *rlqs.RateLimitQuotaResponse) *typev3.RateLimitStrategy {
				for _, a := range resp.GetBucketAction() {
					if bucketKey(a.GetBucketId()) == bucketKey(x) {
						return a.GetQuotaAssignmentAction().GetRateLimitStrategy()
					}
				}
				return nil
			}
			resp, err := exchange(t, st, "quota", usage(x, 5, 0, time.Second))
			if err != nil {
				t.Fatal(err)
			}
			before := strategy(resp)
			if got := rate(before); got != 907 {
				t.Fatalf("with Redis up: %v/s, want 907/s", got)
			}

			if err := stall(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = resume() })
			for i := range 3 {
				resp, err = exchange(t, st, "", usage(x, 5, 0, time.Second), usage(bob, 1, 0, 0))
				if err != nil {
					t.Fatalf("report %d with the store stalled: %v, want the stream to go on", i, err)
				}
				got := strategy(resp)
				switch {
				case c.late && got != nil:
					t.Errorf("report %d with the store stalled, a live assignment: %v, want no action (Envoy keeps it)", i, got)
				case !c.late && !proto.Equal(got, before):
					t.Errorf("report %d with the store slow within the timeout: %v, want the same strategy as before, %v", i, got, before)
				}
			}

			if err := resume(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				resp, err = exchange(t, st, "", usage(x, 5, 0, time.Second), usage(bob, 1, 0, 0))
				if err != nil {
					t.Fatal(err)
				}
				if got := strategy(resp); got != nil {
					if !proto.Equal(got, before) {
						t.Fatalf("after the store came back: %v, want the same strategy as before, %v", got, before)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no assignment 20s after the store came back")
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
