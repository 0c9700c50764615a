package server

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthWatchMethod is the health service's streaming method.
const healthWatchMethod = "/grpc.health.v1.Health/Watch"

// healthWatches ends the health service's Watch streams at shutdown, each
// once it has sent its last status: grpc-go's health server keeps a Watch
// open until its client leaves, and an open stream holds GracefulStop, so a
// single watcher (grpc-go's client-side health checking watches) would hold
// the drain until the shutdown timeout. A watcher that saw SERVING sees
// NOT_SERVING (health.Server.Shutdown sends it), then the end of its
// stream (Canceled); one whose last status was not SERVING gets nothing
// more, so its stream ends at once.
type healthWatches struct {
	mu       sync.Mutex
	draining bool
	streams  map[*watchStream]struct{}
}

// watchStream is one Watch call's stream: its context is cancelled to end
// the call, and it remembers the last status sent.
type watchStream struct {
	grpc.ServerStream
	ctx    context.Context
	cancel context.CancelFunc
	w      *healthWatches
	last   atomic.Int32 // the last status sent; -1 before the first
}

func (s *watchStream) Context() context.Context { return s.ctx }

// SendMsg sends m; during the drain, a status other than SERVING is the
// last the stream sends.
func (s *watchStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if r, ok := m.(*healthpb.HealthCheckResponse); ok {
		s.last.Store(int32(r.GetStatus()))
		if r.GetStatus() != healthpb.HealthCheckResponse_SERVING && s.w.isDraining() {
			s.cancel()
		}
	}
	return err
}

func (w *healthWatches) isDraining() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.draining
}

// stream is the stream interceptor that tracks Watch calls.
func (w *healthWatches) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.FullMethod != healthWatchMethod {
		return handler(srv, ss)
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	s := &watchStream{ServerStream: ss, ctx: ctx, cancel: cancel, w: w}
	s.last.Store(-1)
	w.mu.Lock()
	if w.streams == nil {
		w.streams = map[*watchStream]struct{}{}
	}
	w.streams[s] = struct{}{}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.streams, s)
		w.mu.Unlock()
	}()
	return handler(srv, s)
}

// drain starts the end of every Watch, present and future: those whose last
// status was not SERVING end now, the others once they have sent a status
// other than SERVING (health.Server.Shutdown sends NOT_SERVING to all).
func (w *healthWatches) drain() {
	w.mu.Lock()
	w.draining = true
	var done []*watchStream
	for s := range w.streams {
		if s.last.Load() != int32(healthpb.HealthCheckResponse_SERVING) {
			done = append(done, s)
		}
	}
	w.mu.Unlock()
	for _, s := range done {
		s.cancel()
	}
}
