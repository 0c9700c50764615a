package server

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	xdsserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/xds"
)

// The node of envoyproxy/ratelimit's xDS integration test.
const xdsTestNode = "init-test-node"

// mgmtServer is go-control-plane's xDS management server with a snapshot
// cache, in process; it records every request it receives.
type mgmtServer struct {
	t     *testing.T
	addr  string
	cache cachev3.SnapshotCache

	mu      sync.Mutex
	gs      *grpc.Server
	reqs    []*discoverypb.DiscoveryRequest
	headers []metadata.MD // of each stream opened
}

func newMgmtServer(t *testing.T) *mgmtServer {
	m := &mgmtServer{t: t, addr: "127.0.0.1:0", cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)}
	m.start()
	t.Cleanup(m.stop)
	return m
}

// start serves on m.addr (the same port again after stop).
func (m *mgmtServer) start() {
	m.t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the old socket may linger an instant after stop
		if ln, err = net.Listen("tcp", m.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		m.t.Fatal(err)
	}
	m.addr = ln.Addr().String()
	cb := xdsserver.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discoverypb.DiscoveryRequest) error {
		m.mu.Lock()
		m.reqs = append(m.reqs, r)
		m.mu.Unlock()
		return nil
	}, StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
		md, _ := metadata.FromIncomingContext(ctx)
		m.mu.Lock()
		m.headers = append(m.headers, md)
		m.mu.Unlock()
		return nil
	}}
	gs := grpc.NewServer()
	discoverypb.RegisterAggregatedDiscoveryServiceServer(gs, xdsserver.NewServer(context.Background(), m.cache, cb))
	go gs.Serve(ln)
	m.mu.Lock()
	m.gs = gs
	m.mu.Unlock()
}

// stop ends the server and every stream at once.
func (m *mgmtServer) stop() {
	m.mu.Lock()
	gs := m.gs
	m.gs = nil
	m.mu.Unlock()
	if gs != nil {
		gs.Stop()
	}
}

// set publishes a snapshot of RateLimitConfig resources for the test node.
func (m *mgmtServer) set(version string, rcs ...*rlsconf.RateLimitConfig) {
	m.t.Helper()
	res := make([]types.Resource, len(rcs))
	for i, rc := range rcs {
		res[i] = rc
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		m.t.Fatal(err)
	}
	if err := m.cache.SetSnapshot(context.Background(), xdsTestNode, snap); err != nil {
		m.t.Fatal(err)
	}
}

// waitRequest waits for a request matching ok and returns it.
func (m *mgmtServer) waitRequest(ok func(*discoverypb.DiscoveryRequest) bool) *discoverypb.DiscoveryRequest {
	m.t.Helper()
	var found *discoverypb.DiscoveryRequest
	waitFor(m.t, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, r := range m.reqs {
			if ok(r) {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

// ack and nack match the ACK of version and a NACK naming version as the
// one still served.
func ack(version string) func(*discoverypb.DiscoveryRequest) bool {
	return func(r *discoverypb.DiscoveryRequest) bool {
		return r.GetResponseNonce() != "" && r.GetVersionInfo() == version && r.GetErrorDetail() == nil
	}
}

func nack(served string) func(*discoverypb.DiscoveryRequest) bool {
	return func(r *discoverypb.DiscoveryRequest) bool {
		return r.GetResponseNonce() != "" && r.GetVersionInfo() == served && r.GetErrorDetail() != nil
	}
}

// limited is a descriptor of key with a limit.
func limited(key string, unit rlsconf.RateLimitUnit, rpu uint32) *rlsconf.RateLimitDescriptor {
	return &rlsconf.RateLimitDescriptor{Key: key, RateLimit: &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: rpu}}
}

// xdsBasic and xdsAnother are the resources of envoyproxy/ratelimit's xDS
// integration test (test/integration/xds_sotw_integration_test.go); key3 of
// another allows perHour an hour (10 there).
func xdsBasic() *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: "basic", Domain: "basic", Descriptors: []*rlsconf.RateLimitDescriptor{
		limited("key1", rlsconf.RateLimitUnit_SECOND, 50),
		limited("key1_local", rlsconf.RateLimitUnit_SECOND, 50),
		limited("one_per_minute", rlsconf.RateLimitUnit_MINUTE, 1),
	}}
}

func xdsAnother(perHour uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: "another", Domain: "another", Descriptors: []*rlsconf.RateLimitDescriptor{
		limited("key2", rlsconf.RateLimitUnit_MINUTE, 20),
		limited("key3", rlsconf.RateLimitUnit_HOUR, perHour),
		limited("key2_local", rlsconf.RateLimitUnit_MINUTE, 20),
		limited("key3_local", rlsconf.RateLimitUnit_HOUR, 10),
		limited("key4", rlsconf.RateLimitUnit_DAY, 20),
		limited("key4_local", rlsconf.RateLimitUnit_DAY, 20),
	}}
}

// xdsReload is the resource envoy's test adds on reload.
func xdsReload() *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: "reload", Domain: "reload", Descriptors: []*rlsconf.RateLimitDescriptor{
		limited("key1", rlsconf.RateLimitUnit_SECOND, 50),
		limited("block", rlsconf.RateLimitUnit_SECOND, 0),
		limited("one_per_minute", rlsconf.RateLimitUnit_MINUTE, 1),
	}}
}

// startXDSServer runs a Server whose configuration comes from m, on a
// memory backend with a clock that does not move (windows never roll over
// during a test).
func startXDSServer(t *testing.T, m *mgmtServer, log *syncLog) *Server {
	t.Helper()
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	var h slog.Handler = slog.DiscardHandler
	if log != nil {
		h = slog.NewTextHandler(log, nil)
	}
	return startServer(t, Config{
		Backend: backend.NewMemory(backend.WithClock(fake)),
		XDS: &xds.Options{Address: m.addr, NodeID: xdsTestNode, NodeMetadata: map[string]string{"zone": "eu-1"},
			Headers:       map[string]string{"authorization": "Bearer xds-token"},
			RetryInterval: 50 * time.Millisecond, MaxRetryInterval: 200 * time.Millisecond},
		Logger: slog.New(h),
	})
}

// xdsDecide asks srv once about domain with one descriptor of one entry.
func xdsDecide(t *testing.T, srv *Server, domain, key, value string) Status {
	t.Helper()
	r, err := srv.Service().Decide(context.Background(), &Request{Domain: domain,
		Descriptors: []Descriptor{{Cost: 1, Entries: []config.Entry{{Key: key, Value: value}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return r.Statuses[0]
}

func configVersion(srv *Server) string {
	_, v, _ := srv.Service().Config()
	return v
}

// TestXDSInitialAndUpdate: the management server's snapshot becomes the
// configuration (ACKed, decisions follow it, a successful load counted); a
// new snapshot with a changed limit and a new domain is served in turn, and
// what was counted under the old limit carries over.
func TestXDSInitialAndUpdate(t *testing.T) {
	m := newMgmtServer(t)
	m.set("1", xdsBasic(), xdsAnother(10))
	srv := startXDSServer(t, m, nil)

	first := m.waitRequest(func(r *discoverypb.DiscoveryRequest) bool { return r.GetNode() != nil })
	if first.GetNode().GetId() != xdsTestNode || first.GetNode().GetMetadata().GetFields()["zone"].GetStringValue() != "eu-1" ||
		first.GetTypeUrl() != xds.TypeURL || len(first.GetResourceNames()) != 0 {
		t.Fatalf("first request: %v", first)
	}
	m.waitRequest(ack("1"))
	m.mu.Lock()
	if len(m.headers) == 0 || len(m.headers[0].Get("authorization")) != 1 || m.headers[0].Get("authorization")[0] != "Bearer xds-token" {
		t.Errorf("stream headers %v, want authorization: Bearer xds-token", m.headers)
	}
	m.mu.Unlock()
	waitFor(t, func() bool { return configVersion(srv) == "1" })
	if !srv.Service().Ready() {
		t.Fatal("not ready with a configuration")
	}
	if got := metricValue(t, srv.Metrics(), "floodgate_config_reloads_total", "result", "success"); got != 1 {
		t.Fatalf("successful loads: %v, want 1", got)
	}

	// envoy's expected values: one_per_minute admits one, then OVER_LIMIT;
	// key2 (20 a minute) has 19 left after the first.
	if st := xdsDecide(t, srv, "basic", "one_per_minute", "foo"); st.Code != CodeOK || st.Remaining != 0 {
		t.Fatalf("one_per_minute #1: %+v", st)
	}
	if st := xdsDecide(t, srv, "basic", "one_per_minute", "foo"); st.Code != CodeOverLimit {
		t.Fatalf("one_per_minute #2: %+v", st)
	}
	if st := xdsDecide(t, srv, "another", "key2", "bar"); st.Code != CodeOK || st.Remaining != 19 || st.Limit.RequestsPerUnit != 20 {
		t.Fatalf("key2: %+v", st)
	}
	for i := range 4 { // key3: 10 an hour, 6 left
		if st := xdsDecide(t, srv, "another", "key3", "baz"); st.Code != CodeOK || st.Remaining != int64(9-i) {
			t.Fatalf("key3 #%d: %+v", i+1, st)
		}
	}
	if st := xdsDecide(t, srv, "reload", "key1", "x"); st.Limit != nil {
		t.Fatalf("domain reload before it is pushed: %+v", st)
	}

	// Snapshot 2: key3 raised to 15 an hour, domain reload added.
	m.set("2", xdsBasic(), xdsAnother(15), xdsReload())
	m.waitRequest(ack("2"))
	waitFor(t, func() bool { return configVersion(srv) == "2" })
	if st := xdsDecide(t, srv, "another", "key3", "baz"); st.Code != CodeOK || st.Remaining != 10 || st.Limit.RequestsPerUnit != 15 {
		t.Fatalf("key3 after raising to 15 with 4 spent: %+v, want OK with 10 left", st)
	}
	if st := xdsDecide(t, srv, "reload", "block", "x"); st.Code != CodeOverLimit {
		t.Fatalf("reload/block (0 a second): %+v", st)
	}
	if st := xdsDecide(t, srv, "basic", "one_per_minute", "foo"); st.Code != CodeOverLimit {
		t.Fatalf("one_per_minute after the update: %+v (its count should carry over)", st)
	}
	if got := metricValue(t, srv.Metrics(), "floodgate_config_reloads_total", "result", "success"); got != 2 {
		t.Fatalf("successful loads: %v, want 2", got)
	}
}

// TestXDSInvalidResourceNACK: a push that fails the file checks is NACKed
// with the error, counted as a failed reload and logged; the previous
// configuration keeps serving, and a later good push is taken.
func TestXDSInvalidResourceNACK(t *testing.T) {
	m := newMgmtServer(t)
	m.set("1", xdsBasic(), xdsAnother(10))
	var log syncLog
	srv := startXDSServer(t, m, &log)
	m.waitRequest(ack("1"))
	waitFor(t, func() bool { return configVersion(srv) == "1" })
	xdsDecide(t, srv, "another", "key3", "baz")

	bad := xdsAnother(10)
	bad.Descriptors = append(bad.Descriptors, &rlsconf.RateLimitDescriptor{Key: "nounit",
		RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 5}}) // no unit: invalid
	m.set("2", xdsBasic(), bad)
	n := m.waitRequest(nack("1"))
	if msg := n.GetErrorDetail().GetMessage(); !strings.Contains(msg, "xds:another") || !strings.Contains(msg, "unit") {
		t.Fatalf("NACK error detail %q: want the resource and the problem", msg)
	}
	waitFor(t, func() bool {
		return metricValue(t, srv.Metrics(), "floodgate_config_reloads_total", "result", "failure") == 1
	})
	if v := configVersion(srv); v != "1" {
		t.Fatalf("version served after a NACK: %q, want 1", v)
	}
	if !strings.Contains(log.String(), "configuration rejected") {
		t.Fatalf("no rejection logged:\n%s", log.String())
	}
	if st := xdsDecide(t, srv, "another", "key3", "baz"); st.Code != CodeOK || st.Remaining != 8 {
		t.Fatalf("key3 under the kept configuration: %+v", st)
	}

	// Two domains of one name: rejected as two files would be.
	dup := xdsBasic()
	dup.Name = "basic-again"
	m.set("3", xdsBasic(), dup)
	m.waitRequest(func(r *discoverypb.DiscoveryRequest) bool {
		return nack("1")(r) && strings.Contains(r.GetErrorDetail().GetMessage(), "duplicate domain")
	})
	waitFor(t, func() bool {
		return metricValue(t, srv.Metrics(), "floodgate_config_reloads_total", "result", "failure") == 2
	})

	m.set("4", xdsBasic(), xdsAnother(10), xdsReload())
	m.waitRequest(ack("4"))
	waitFor(t, func() bool { return configVersion(srv) == "4" })
	if st := xdsDecide(t, srv, "reload", "block", "x"); st.Code != CodeOverLimit {
		t.Fatalf("reload/block after a good push: %+v", st)
	}
}

// TestXDSReconnect: the management server goes away; the configuration
// keeps serving; the client connects again (naming the version it has) and
// takes what the restarted server pushes.
func TestXDSReconnect(t *testing.T) {
	m := newMgmtServer(t)
	m.set("1", xdsBasic(), xdsAnother(10))
	srv := startXDSServer(t, m, nil)
	m.waitRequest(ack("1"))
	waitFor(t, func() bool { return configVersion(srv) == "1" })

	m.stop()
	m.mu.Lock()
	m.reqs = nil
	m.mu.Unlock()
	time.Sleep(300 * time.Millisecond) // a few failed attempts
	if st := xdsDecide(t, srv, "another", "key2", "bar"); st.Code != CodeOK || st.Remaining != 19 {
		t.Fatalf("key2 with the management server down: %+v", st)
	}

	m.cache = cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil) // a new process
	m.set("2", xdsBasic(), xdsAnother(10), xdsReload())
	m.start()
	again := m.waitRequest(func(r *discoverypb.DiscoveryRequest) bool { return r.GetNode() != nil })
	if again.GetVersionInfo() != "1" || again.GetNode().GetId() != xdsTestNode {
		t.Fatalf("first request after reconnecting: %v, want version 1", again)
	}
	m.waitRequest(ack("2"))
	waitFor(t, func() bool { return configVersion(srv) == "2" })
	if st := xdsDecide(t, srv, "reload", "block", "x"); st.Code != CodeOverLimit {
		t.Fatalf("reload/block after reconnecting: %+v", st)
	}
	if st := xdsDecide(t, srv, "another", "key2", "bar"); st.Remaining != 18 {
		t.Fatalf("key2 after reconnecting: %+v, want 18 left", st)
	}
}
