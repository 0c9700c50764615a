//go:build linux

package main

import (
	"context"
	"math"
	"testing"
	"time"

	rlqs "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestRLQSTwoServers: two floodgate processes on one Redis share one
// budget between the data planes of both. Each data plane (go-control-plane's
// RLQS client, as Envoy's rate_limit_quota filter) reports to its own
// server once a second; the shares they are assigned (what a token bucket
// admits in a second at most: fewer than max_tokens and a second's fill,
// in whole requests) never add up to more than the limit, and settle at
// about half of the budget each (the limit less its 0.3% reserve) within a
// few seconds: each change of a share waits for the room its new bucket
// takes.
func TestRLQSTwoServers(t *testing.T) {
	r := testenv.SharedRedis(t)
	args := []string{"--redis", redisURL(r), "--redis-prefix", uniquePrefix(t), "--quota-ttl", "5s"}
	servers := []*fgServer{startServer(t, "testdata/rlqs.yaml", args...), startServer(t, "testdata/rlqs.yaml", args...)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
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
	const rounds = 8
	for round := range rounds {
		for i, p := range planes {
			domain := ""
			if round == 0 {
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
				t.Fatalf("round %d: %v", round, err)
			}
			s := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy()
			tb := s.GetTokenBucket()
			if tb == nil {
				t.Fatalf("round %d: %v, want a token bucket", round, resp)
			}
			if fi := tb.GetFillInterval().AsDuration(); fi <= 0 || fi%time.Second != 0 {
				t.Fatalf("round %d: %v, want a fill interval of whole seconds", round, tb)
			}
			// What a second's window (half-open) admits at most: fewer than
			// a full bucket and a second's fill.
			held[i] = math.Ceil(float64(tb.GetMaxTokens())+float64(tb.GetTokensPerFill().GetValue())/tb.GetFillInterval().AsDuration().Seconds()) - 1
			if sum := held[0] + held[1]; sum > 1000 {
				t.Fatalf("round %d: the data planes hold %v/s, over the limit", round, sum)
			}
		}
		if round < rounds-1 {
			time.Sleep(1100 * time.Millisecond) // past a unit: the last changes' room is free again
		}
	}
	for i, h := range held {
		if h < 0.45*997 || h > math.Ceil(0.5*997) {
			t.Errorf("data plane %d (server %d) settled at %v/s, want about half of 997/s", i, i+1, h)
		}
	}
}

type rlqsClient = interface {
	Send(*rlqs.RateLimitQuotaUsageReports) error
	Recv() (*rlqs.RateLimitQuotaResponse, error)
}
