package main

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	xdsserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestEnvoyCompatXDSWaitsForFirstConfig: with CONFIG_TYPE=GRPC_XDS_SOTW and
// without FORCE_START_WITHOUT_INITIAL_CONFIG, the APIs answer only once the
// first push has come, as envoyproxy/ratelimit waits for its first
// configuration before serving (f2fb157, src/service/ratelimit.go
// NewService; test/integration's xDS tests ask right after the port opens
// and expect the pushed limits: key1 50 per second, 49 left).
func TestEnvoyCompatXDSWaitsForFirstConfig(t *testing.T) {
	r := testenv.NewRedis(t)
	const node = "init-test-node"
	snaps := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	discoverypb.RegisterAggregatedDiscoveryServiceServer(gs, xdsserver.NewServer(context.Background(), snaps, nil))
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)

	// A free port for gRPC, known before floodgate logs it.
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcPort := pl.Addr().(*net.TCPAddr).Port
	pl.Close()

	// Before the push: a call is not answered.
	probe := make(chan error, 1)
	go func() {
		// Wait until floodgate listens: it accepts connections before the
		// push, but does not answer on them.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(grpcPort))
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("floodgate does not listen on its gRPC port before the first push: %v", err)
				probe <- err
				return
			}
		}
		conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			probe <- err
			return
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		resp, err := rls.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request("basic", entries("key1", "foo")))
		if err == nil {
			t.Errorf("answered before the first xDS push: %v", resp)
		}
		probe <- err
	}()
	go func() {
		if err := <-probe; err == nil {
			return
		}
		snap, err := cachev3.NewSnapshot("1", map[resource.Type][]types.Resource{resource.RateLimitConfigType: {
			&rlsconf.RateLimitConfig{Name: "basic", Domain: "basic", Descriptors: []*rlsconf.RateLimitDescriptor{{
				Key: "key1", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 50}}}},
		}})
		if err == nil {
			err = snaps.SetSnapshot(context.Background(), node, snap)
		}
		if err != nil {
			t.Error(err)
		}
	}()
	env := []string{
		"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(grpcPort), "LOG_FORMAT=json",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + r.Addr, "CACHE_KEY_PREFIX=" + uniquePrefix(t),
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_ID=" + node, "CONFIG_GRPC_XDS_SERVER_URL=" + ln.Addr().String(),
	}
	s := startServerWith(t, serveOpts{env: env, bare: true}, "", "--compat", "envoy")
	s.waitLog(5*time.Second, "waiting for the first configuration")
	checkResponse(t, "the first call after the push", s.mustRL(request("basic", entries("key1", "foo"))), ok(50, second, 49))
}
