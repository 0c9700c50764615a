package server

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/backend"
)

// TestHealthWatchEndsAtShutdown: health Watch streams open at shutdown do
// not hold the drain. A watcher of a SERVING service gets NOT_SERVING, then
// the end of its stream; a watcher of an unknown service (nothing more to
// send) sees its stream end; Serve returns although the shutdown timeout is
// far away.
func TestHealthWatchEndsAtShutdown(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, filepath.Join(dir, "api.yaml"), testYAML)
	srv, err := New(Config{ConfigPath: dir, Backend: backend.NewMemory(), HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		ShutdownTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx) }()

	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(conn)
	watch := func(service string, first healthpb.HealthCheckResponse_ServingStatus) healthpb.Health_WatchClient {
		w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatal(err)
		}
		if m, err := w.Recv(); err != nil || m.GetStatus() != first {
			t.Fatalf("Watch(%q): %v, %v; want %v", service, m, err, first)
		}
		return w
	}
	serving := watch(HealthService, healthpb.HealthCheckResponse_SERVING)
	unknown := watch("nope", healthpb.HealthCheckResponse_SERVICE_UNKNOWN)

	stop()
	if m, err := serving.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Watch(%q) at shutdown: %v, %v; want NOT_SERVING", HealthService, m, err)
	}
	for name, w := range map[string]healthpb.Health_WatchClient{HealthService: serving, "nope": unknown} {
		if m, err := w.Recv(); err == nil || status.Code(err) == codes.DeadlineExceeded {
			t.Errorf("Watch(%q) after shutdown: %v, %v; want the stream ended by the server", name, m, err)
		}
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Serve did not return: a health Watch holds the drain")
	}
}
