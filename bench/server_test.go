package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/backend/rueidisadapter"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server"
	"github.com/floodgate-dev/floodgate/server/config"
)

// The decision server's configuration in BenchmarkDecisionServer: one
// fixed window (envoyproxy/ratelimit's only algorithm, and the server's
// default) high enough that every decision is admitted, and the library's
// rule that is the same limit.
const decisionServerYAML = `domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

var decisionServerRule = ratelimit.FixedWindow{Limit: 1_000_000_000, Window: time.Second}

// BenchmarkDecisionServer measures what the decision server costs on top of
// the library it is built on, in one process on the same store, at 64
// goroutines, one hot key or 10,000 keys:
//
//	via=lib      ratelimit.Limiter.Allow: the library alone
//	via=allowall ratelimit.AllowAll with that one request: the call the server makes
//	via=service  server.Service.Decide: matching, AllowAll, metrics; no transport
//	via=grpc     Envoy RLS v3 ShouldRateLimit to an in-process server over
//	             loopback, 4 connections (one per 16 goroutines, as floodgate bench)
//	via=http     POST /v1/check to the same server, one connection per goroutine
//
// store=redis is the rueidis adapter on the private Redis of redis_test.go
// (auto-pipelining); it also reports server-µs/op and server-busy as
// BenchmarkRedis does. The ratio grpc/lib on Redis is the issue's "at least
// 80% of the library's own decisions/s in the same run". Client and server
// share the machine's cores, so the transports' numbers include the client's
// own work.
func BenchmarkDecisionServer(b *testing.B) {
	for _, store := range []string{"memory", "redis"} {
		for _, via := range []string{"lib", "allowall", "service", "grpc", "http"} {
			for _, nkeys := range []int{1, 10000} {
				name := fmt.Sprintf("store=%s/via=%s/keys=%d/g=64", store, via, nkeys)
				b.Run(name, func(b *testing.B) {
					var (
						be  backend.Backend
						c   *clients
						err error
					)
					if store == "redis" {
						c = redisClients(b)
						c.flush(b)
						be, err = rueidisadapter.New(c.rued, backend.WithPrefix("fgsrv"))
					} else {
						m := backend.NewMemory()
						b.Cleanup(func() { m.Close() })
						be = m
					}
					if err != nil {
						b.Fatal(err)
					}
					f := decisionServerVia(b, via, be)
					keys := benchKeys(nkeys)
					var cpu0 float64
					if c != nil {
						cpu0 = c.serverCPU(b)
					}
					elapsed := run(b, 64, keys, true, f)
					if c != nil {
						cpu := c.serverCPU(b) - cpu0
						b.ReportMetric(cpu*1e6/float64(b.N), "server-µs/op")
						b.ReportMetric(cpu/elapsed.Seconds(), "server-busy")
					}
				})
			}
		}
	}
}

// decisionServerVia returns the decide function of one way in.
func decisionServerVia(b *testing.B, via string, be backend.Backend) decide {
	ctx := context.Background()
	switch via {
	case "lib", "allowall":
		lim, err := ratelimit.New(be, decisionServerRule)
		if err != nil {
			b.Fatal(err)
		}
		if via == "allowall" {
			return func(key string) (bool, error) {
				var res [1]ratelimit.Result
				return ratelimit.AllowAll(ctx, []ratelimit.Request{{Limiter: lim, Key: key, N: 1}}, res[:])
			}
		}
		return func(key string) (bool, error) {
			r, err := lim.Allow(ctx, key)
			return r.Allowed, err
		}
	}
	srv := startDecisionServer(b, be)
	switch via {
	case "service":
		svc := srv.Service()
		return func(key string) (bool, error) {
			resp, err := svc.Decide(ctx, &server.Request{Domain: "bench", Descriptors: []server.Descriptor{
				{Entries: []config.Entry{{Key: "user", Value: key}}, Cost: 1},
			}})
			if err != nil {
				return false, err
			}
			return resp.Code == server.CodeOK, nil
		}
	case "grpc":
		const conns = 4
		var clients [conns]rls.RateLimitServiceClient
		for i := range clients {
			cc, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { cc.Close() })
			clients[i] = rls.NewRateLimitServiceClient(cc)
		}
		var next atomic.Uint32
		return func(key string) (bool, error) {
			// The harness calls from 64 goroutines; round-robin over the
			// connections loads each as evenly as one per 16 goroutines.
			resp, err := clients[next.Add(1)%conns].ShouldRateLimit(ctx, &rls.RateLimitRequest{
				Domain: "bench",
				Descriptors: []*rlscommon.RateLimitDescriptor{{
					Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: key}},
				}},
			})
			if err != nil {
				return false, err
			}
			return resp.GetOverallCode() == rls.RateLimitResponse_OK, nil
		}
	case "http":
		tr := &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64, DisableCompression: true}
		b.Cleanup(tr.CloseIdleConnections)
		hc := &http.Client{Transport: tr}
		url := "http://" + srv.HTTPAddr() + "/v1/check"
		return func(key string) (bool, error) {
			resp, err := hc.Post(url, "application/json",
				strings.NewReader(`{"domain":"bench","descriptors":[{"user":"`+key+`"}]}`))
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				return false, err
			}
			switch resp.StatusCode {
			case http.StatusOK:
				return true, nil
			case http.StatusTooManyRequests:
				return false, nil
			}
			return false, fmt.Errorf("POST /v1/check: %s", resp.Status)
		}
	}
	b.Fatalf("unknown way in %q", via)
	return nil
}

// startDecisionServer runs the decision server on be, on loopback, until the
// benchmark ends.
func startDecisionServer(b *testing.B, be backend.Backend) *server.Server {
	path := filepath.Join(b.TempDir(), "bench.yaml")
	if err := os.WriteFile(path, []byte(decisionServerYAML), 0o644); err != nil {
		b.Fatal(err)
	}
	srv, err := server.New(server.Config{
		ConfigPath:     path,
		HTTPAddr:       "127.0.0.1:0",
		GRPCAddr:       "127.0.0.1:0",
		Backend:        be,
		ReloadInterval: -1,
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Serve: %v", err)
		}
	})
	return srv
}
