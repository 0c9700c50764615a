package main

import (
	"context"
	"net"
	"net/http"
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
	snaps, xdsAddr := managementServer(t)

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
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_ID=" + node, "CONFIG_GRPC_XDS_SERVER_URL=" + xdsAddr,
	}
	s := startServerWith(t, serveOpts{env: env, bare: true}, "", "--compat", "envoy")
	s.waitLog(5*time.Second, "waiting for the first configuration")
	checkResponse(t, "the first call after the push", s.mustRL(request("basic", entries("key1", "foo"))), ok(50, second, 49))
}

// TestConfigXDS runs `floodgate serve --config-xds` (floodgate's own mode,
// the memory backend) against go-control-plane's server in the test: before
// any push it serves and answers "no configuration"; a pushed snapshot is
// served (and /readyz passes), and so is a changed one, without a restart, with what was counted
// carried over; a snapshot that fails the file checks is rejected (logged,
// counted as a failed reload) while the previous one keeps serving.
func TestConfigXDS(t *testing.T) {
	const node = "e2e-node"
	snaps, xdsAddr := managementServer(t)
	push := func(version string, rpu uint32, unit rlsconf.RateLimitUnit) {
		t.Helper()
		snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: {
			&rlsconf.RateLimitConfig{Name: "reload", Domain: "reload", Descriptors: []*rlsconf.RateLimitDescriptor{{
				Key: "user", RateLimit: &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: rpu}}}},
		}})
		if err == nil {
			err = snaps.SetSnapshot(context.Background(), node, snap)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	s := startServerWith(t, serveOpts{bare: true}, "", "--config-xds", xdsAddr, "--config-xds-node-id", node,
		"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--log-format", "json")
	// Before the first push: not ready, and no limit applies.
	if code, body := s.get("/readyz", ""); code == http.StatusOK {
		t.Fatalf("/readyz before the first push: %d %s, want not ready", code, body)
	}
	checkResponse(t, "before the first push", s.mustRL(request("reload", entries("user", "u"))), noLimit)

	push("1", 5, rlsconf.RateLimitUnit_HOUR)
	waitLimit(t, s, 5, 10*time.Second)
	if code, body := s.get("/readyz", ""); code != http.StatusOK {
		t.Fatalf("/readyz after the first push: %d %s", code, body)
	}
	avoidWindowEdge(time.Hour, 5*time.Second)
	for i := range 3 {
		checkResponse(t, "under the first push", s.mustRL(request("reload", entries("user", "carry"))), ok(5, hour, uint32(4-i)))
	}

	push("2", 100, rlsconf.RateLimitUnit_HOUR)
	waitLimit(t, s, 100, 10*time.Second)
	// The 3 counted under 5/hour carry over.
	checkResponse(t, "after the update", s.mustRL(request("reload", entries("user", "carry"))), ok(100, hour, 96))
	if got := s.metric("", "floodgate_config_reloads_total", "result", "success"); got != 2 {
		t.Errorf("successful loads: %v, want 2", got)
	}

	push("3", 7, rlsconf.RateLimitUnit_UNKNOWN) // no unit: invalid
	s.waitLog(10*time.Second, "configuration rejected")
	if got := s.metric("", "floodgate_config_reloads_total", "result", "failure"); got != 1 {
		t.Errorf("failed loads: %v, want 1", got)
	}
	waitLimit(t, s, 100, time.Second) // still the previous one
}

// managementServer starts go-control-plane's ADS server on a free port, for
// the test's lifetime, and returns its snapshot cache and address.
func managementServer(t *testing.T) (cachev3.SnapshotCache, string) {
	t.Helper()
	snaps := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	discoverypb.RegisterAggregatedDiscoveryServiceServer(gs, xdsserver.NewServer(context.Background(), snaps, nil))
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return snaps, ln.Addr().String()
}
