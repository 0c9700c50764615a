//go:build linux

package main

import (
	"context"
	"testing"
	"time"

	rlqs "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestRLQSTwoServers: two floodgate processes on one Redis share one
// budget between the data planes of both. Each data plane (go-control-plane's
// RLQS client, as Envoy's rate_limit_quota filter) reports to its own
// server; the shares they are assigned (what a token bucket admits in one
// second at most: max_tokens plus a second's fill) never add up to more than
// the limit, and settle at half of the budget (97% of the limit) each.
func TestRLQSTwoServers(t *testing.T) {
	r := testenv.SharedRedis(t)
	args := []string{"--redis", redisURL(r), "--redis-prefix", uniquePrefix(t), "--quota-ttl", "5s"}
	servers := []*fgServer{startServer(t, "testdata/rlqs.yaml", args...), startServer(t, "testdata/rlqs.yaml", args...)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var planes []rlqsClient
	for _, s := range servers {
		st, err := rlqs.NewRateLimitQuotaServiceClient(s.conn).StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		planes = append(planes, st)
	}
	held := make([]float64, len(planes))
	// Both want 500/s; the first to report takes the budget, the second half
	// of the reserve; then the first shrinks to its half, and the second grows
	// to it.
	for i, step := range []struct {
		plane int
		want  float64
	}{{0, 970}, {1, 15}, {0, 485}, {1, 485}, {0, 485}} {
		p := planes[step.plane]
		domain := ""
		if i < 2 {
			domain = "quota"
		}
		if err := p.Send(&rlqs.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: []*rlqs.RateLimitQuotaUsageReports_BucketQuotaUsage{{
			BucketId:           &rlqs.BucketId{Bucket: map[string]string{"tenant": "acme"}},
			NumRequestsAllowed: 500, TimeElapsed: durationpb.New(time.Second),
		}}}); err != nil {
			t.Fatal(err)
		}
		resp, err := p.Recv()
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		tb := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
		if tb == nil {
			t.Fatalf("step %d: %v, want a token bucket", i, resp)
		}
		if tb.GetFillInterval().AsDuration() != time.Second {
			t.Fatalf("step %d: %v, want a fill interval of 1s (the limit's unit)", i, tb)
		}
		held[step.plane] = float64(tb.GetMaxTokens() + tb.GetTokensPerFill().GetValue())
		if held[step.plane] != step.want {
			t.Errorf("step %d: data plane %d (server %d) got %v/s, want %v/s", i, step.plane, step.plane+1, held[step.plane], step.want)
		}
		if sum := held[0] + held[1]; sum > 1000 {
			t.Fatalf("step %d: the data planes hold %v/s, over the limit", i, sum)
		}
	}
}

type rlqsClient = interface {
	Send(*rlqs.RateLimitQuotaUsageReports) error
	Recv() (*rlqs.RateLimitQuotaResponse, error)
}
