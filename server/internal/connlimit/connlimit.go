// Package connlimit caps the connections open on the server's listeners
// together, so that the process always keeps descriptors for its store's
// connections, reloads and probes (see Limit).
package connlimit

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// Limit caps the connections open on a server's listeners together (HTTP
// and gRPC), so that the process always keeps descriptors for its store's
// connections, configuration reloads and probes, and never fails with EMFILE.
//
// A listener wrapped by Wrap admits a new connection while fewer than max
// are open. At the cap it makes room by closing the connection idle the
// longest: an HTTP connection between requests, or one that has not sent a
// request yet (a TLS handshake or request header still to come); a gRPC
// connection without an RPC in flight, whether or not it has sent its
// preface. When every open connection is serving a request, the new one is
// refused: closed right after accept, so that the accept loop never blocks.
// Which connections are serving it learns from http.Server.ConnState
// (ConnState) and from gRPC interceptors (Unary, Stream); "idle the longest"
// is by the order of these events, not by a clock.
//
// A connection closed to make room may have been about to send a request: a
// good client sees a reset connection on reuse and reconnects, as HTTP and
// gRPC clients do. A request whose body never comes keeps its connection
// serving, out of reach of the cap, until Config.HTTPReadTimeout; a
// connection that sends nothing is closed to make room, or at that deadline
// (Config.GRPCHandshakeTimeout on the gRPC listener), whichever comes first.
//
// Safe for concurrent use.
type Limit struct {
	max int // math.MaxInt: no cap, only the counts

	mu    sync.Mutex
	conns []*trackedConn // the open ones, in no order; conns[c.idx] == c
	seq   atomic.Uint64  // a larger trackedConn.since is more recent activity

	open map[string]prometheus.Gauge // by listener
	shed *prometheus.CounterVec      // by listener and reason
}

// Reasons of floodgate_connections_shed_total.
const (
	shedIdle    = "idle"        // an idle connection closed to admit a new one
	shedRefused = "refused"     // a new connection closed at once: every open one was serving
	shedNoFDs   = "descriptors" // an idle connection closed because accept failed with EMFILE or ENFILE
)

// New returns a limit of max connections over the listeners named (the
// metrics' listener label); max <= 0 means no cap. Its metrics are
// registered in reg:
//
//	floodgate_connections_open{listener}             connections open now
//	floodgate_connections_limit                      the cap on them together; 0 when none
//	floodgate_connections_shed_total{listener,reason} idle, refused, descriptors
func New(reg prometheus.Registerer, max int, listeners ...string) *Limit {
	l := &Limit{max: max, open: map[string]prometheus.Gauge{}}
	if max <= 0 {
		l.max, max = math.MaxInt, 0
	}
	open := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "floodgate_connections_open", Help: "Connections open, by listener.",
	}, []string{"listener"})
	l.shed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_connections_shed_total",
		Help: "Connections closed by the connection cap, by listener and reason: idle (closed to admit a new one), " +
			"refused (a new one, when every open one was serving), descriptors (closed when accept ran out of descriptors).",
	}, []string{"listener", "reason"})
	limit := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "floodgate_connections_limit", Help: "The cap on open connections over all listeners; 0 when there is none.",
	})
	limit.Set(float64(max))
	reg.MustRegister(open, l.shed, limit)
	for _, ln := range listeners {
		l.open[ln] = open.WithLabelValues(ln)
		for _, r := range []string{shedIdle, shedRefused, shedNoFDs} {
			l.shed.WithLabelValues(ln, r)
		}
	}
	return l
}

// Capacity returns the cap, 0 when there is none.
func (l *Limit) Capacity() int {
	if l.max == math.MaxInt {
		return 0
	}
	return l.max
}

// Wrap returns ln with its connections counted and capped by l, under the
// name listener.
func (l *Limit) Wrap(ln net.Listener, listener string) net.Listener {
	return &limitedListener{Listener: ln, lim: l, name: listener}
}

// limitedListener is a listener whose connections a Limit tracks.
type limitedListener struct {
	net.Listener
	lim  *Limit
	name string
}

// Accept returns the next connection the limit admits. It returns the
// listener's errors as they are: net/http and grpc-go back off on temporary
// ones such as EMFILE, for which Accept also closes the idlest connection.
func (ln *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				ln.lim.shedIdlest(shedNoFDs)
			}
			return nil, err
		}
		tc := &trackedConn{Conn: c, lim: ln.lim, listener: ln.name}
		tc.addr = connAddr{Addr: c.RemoteAddr(), c: tc}
		if ln.lim.admit(tc) {
			return tc, nil
		}
		c.Close()
	}
}

// admit tracks c, closing the idlest connection first when the cap is
// reached. It returns false, tracking nothing, when every open connection is
// serving.
func (l *Limit) admit(c *trackedConn) bool {
	l.mu.Lock()
	var victim *trackedConn
	if len(l.conns) >= l.max {
		if victim = l.idlestLocked(); victim == nil {
			l.mu.Unlock()
			l.shed.WithLabelValues(c.listener, shedRefused).Inc()
			return false
		}
		l.removeLocked(victim)
	}
	c.since.Store(l.seq.Add(1))
	c.idx = len(l.conns)
	l.conns = append(l.conns, c)
	l.mu.Unlock()
	l.open[c.listener].Inc()
	if victim != nil {
		l.evict(victim, shedIdle)
	}
	return true
}

// shedIdlest closes the connection idle the longest, if any.
func (l *Limit) shedIdlest(reason string) {
	l.mu.Lock()
	victim := l.idlestLocked()
	if victim != nil {
		l.removeLocked(victim)
	}
	l.mu.Unlock()
	if victim != nil {
		l.evict(victim, reason)
	}
}

// evict closes c, which removeLocked no longer tracks.
func (l *Limit) evict(c *trackedConn, reason string) {
	c.Conn.Close()
	l.shed.WithLabelValues(c.listener, reason).Inc()
}

// idlestLocked returns the open connection idle the longest, or nil when
// every one is serving. It requires l.mu; its cost is linear in the open
// connections, paid only at the cap.
func (l *Limit) idlestLocked() *trackedConn {
	var idlest *trackedConn
	var since uint64
	for _, c := range l.conns {
		if c.busy.Load() > 0 {
			continue
		}
		if s := c.since.Load(); idlest == nil || s < since {
			idlest, since = c, s
		}
	}
	return idlest
}

// remove stops tracking c; it may be called more than once.
func (l *Limit) remove(c *trackedConn) {
	l.mu.Lock()
	l.removeLocked(c)
	l.mu.Unlock()
}

// removeLocked stops tracking c, if it still is. It requires l.mu.
func (l *Limit) removeLocked(c *trackedConn) {
	if c.idx < 0 {
		return
	}
	last := len(l.conns) - 1
	l.conns[c.idx] = l.conns[last]
	l.conns[c.idx].idx = c.idx
	l.conns[last] = nil
	l.conns = l.conns[:last]
	c.idx = -1
	l.open[c.listener].Dec()
}

// idle records that c stopped serving now.
func (l *Limit) idle(c *trackedConn) {
	c.since.Store(l.seq.Add(1))
	c.busy.Store(0)
}

// ConnState is the http.Server's ConnState hook: a connection is serving
// from the first byte of a request until its answer is written.
func (l *Limit) ConnState(c net.Conn, st http.ConnState) {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		c = tc.NetConn()
	}
	tc, ok := c.(*trackedConn)
	if !ok {
		return
	}
	switch st {
	case http.StateActive, http.StateHijacked:
		tc.busy.Store(1)
	case http.StateIdle:
		l.idle(tc)
	}
}

// Unary is a gRPC interceptor marking the call's connection busy while the
// call runs.
//
// An interceptor rather than a stats.Handler: grpc-go calls a stats handler
// with an event allocated for each phase of every call, where this costs two
// atomic additions.
func (l *Limit) Unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	tc := rpcConn(ctx)
	if tc == nil {
		return handler(ctx, req)
	}
	tc.busy.Add(1)
	defer l.rpcDone(tc)
	return handler(ctx, req)
}

// Stream is Unary's counterpart for streaming calls (the health service's
// Watch).
func (l *Limit) Stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	tc := rpcConn(ss.Context())
	if tc == nil {
		return handler(srv, ss)
	}
	tc.busy.Add(1)
	defer l.rpcDone(tc)
	return handler(srv, ss)
}

func (l *Limit) rpcDone(c *trackedConn) {
	c.since.Store(l.seq.Add(1))
	c.busy.Add(-1)
}

// rpcConn returns the connection of a gRPC call, found through the peer
// address grpc-go took from it (connAddr).
func rpcConn(ctx context.Context) *trackedConn {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	if a, ok := p.Addr.(*connAddr); ok {
		return a.c
	}
	return nil
}

// trackedConn is a connection a Limit counts. Closing it stops the
// tracking.
type trackedConn struct {
	net.Conn
	lim      *Limit
	listener string
	addr     connAddr

	busy  atomic.Int32  // HTTP: 1 while a request is read or served; gRPC: calls in flight
	since atomic.Uint64 // Limit.seq when accepted or last done serving
	idx   int           // in lim.conns; -1 once untracked; guarded by lim.mu
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.lim.remove(c)
	return err
}

// RemoteAddr returns the peer's address, carrying c: grpc-go hands it to
// interceptors (peer.Peer.Addr), which have no other way to the connection.
// Its String and Network are the underlying connection's.
func (c *trackedConn) RemoteAddr() net.Addr { return &c.addr }

// CloseWrite half-closes a TCP or Unix connection; net/http uses it to let a
// client read an answer before the connection closes.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// connAddr is a remote address with the connection it belongs to.
type connAddr struct {
	net.Addr
	c *trackedConn
}

// Headroom of the default connection cap: descriptors kept for what is not
// a client connection.
const (
	// fdReserve covers stdio, the listeners, the poller, configuration
	// reloads (a directory and a file at a time), probes' short-lived
	// sockets and the --debug-addr endpoint.
	fdReserve = 64
	// fdPerProc is go-redis's default pool size per GOMAXPROCS, for one
	// Redis node; a Cluster's other nodes come out of the eighth of the
	// limit kept besides.
	fdPerProc = 10
)

// Cap returns the default cap on open connections for a soft
// RLIMIT_NOFILE of soft with procs GOMAXPROCS: soft less fdReserve, less
// fdPerProc per proc, less an eighth, and at least a quarter of soft. An
// unlimited soft limit (or one beyond what an int holds) gives no cap (0).
//
// For example, with 2 procs: 1024 → 812, 2048 → 1708, 65536 → 57260.
func Cap(soft uint64, procs int) int {
	if soft >= math.MaxInt32 {
		return 0
	}
	n := int(soft)
	return max(n-fdReserve-fdPerProc*procs-n/8, n/4, 1)
}

// Busy counts the open connections serving a request.
func (l *Limit) Busy() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.conns {
		if c.busy.Load() > 0 {
			n++
		}
	}
	return n
}
