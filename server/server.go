package server

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqs "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/degraded"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/envoy"
	"github.com/floodgate-dev/floodgate/server/internal/api"
	"github.com/floodgate-dev/floodgate/server/internal/auth"
	"github.com/floodgate-dev/floodgate/server/internal/connlimit"
	"github.com/floodgate-dev/floodgate/server/internal/dashboard"
	"github.com/floodgate-dev/floodgate/server/internal/rlswire"
	"github.com/floodgate-dev/floodgate/server/xds"
)

// streamWorkers is how many goroutines serve gRPC calls, enough for the
// calls a store keeps waiting at a time.
const streamWorkers = 64

// Config configures a Server.
type Config struct {
	ConfigPath string // a file or a directory of *.yaml files; required unless XDS
	HTTPAddr   string // "" serves no HTTP
	GRPCAddr   string // "" serves no gRPC
	Backend    backend.Backend
	Service    Options

	// XDS, when set, takes the configuration from an xDS management server
	// (package xds) instead of ConfigPath: the server starts without one and
	// serves each valid push.
	XDS *xds.Options

	Token string // bearer token required on HTTP and gRPC, allowed every domain; "" for none
	// TokensFile, when set, names a file of bearer tokens, each allowed
	// some domains (docs/server/operations.md, "Tokens per tenant"): a
	// call must then carry Token or one of them, and a token may check
	// and charge only its domains. It is read again with the
	// configuration (ReloadInterval, Reload); a bad new version is logged
	// and the previous one kept.
	TokensFile  string
	TLSCertFile string // both set: TLS on both listeners (gRPC only with TLSGRPCOnly)
	TLSKeyFile  string
	// TLSGRPCOnly keeps the HTTP listener plaintext: TLS, and client
	// certificates, on the gRPC listener only (envoyproxy/ratelimit's
	// GRPC_SERVER_USE_TLS).
	TLSGRPCOnly  bool
	MaxBodyBytes int64 // HTTP body and gRPC message limit; DefaultMaxBodyBytes when 0

	// TLSClientCAFile, with TLS, turns on mutual TLS: both listeners
	// require a client certificate signed by a CA in this PEM file. The
	// certificate, key and CA files are read again when they change (no
	// restart).
	TLSClientCAFile string
	// TLSClientSAN, with TLSClientCAFile, admits only client certificates
	// carrying this subject alternative name (DNS name, IP, URI or e-mail).
	TLSClientSAN string

	// ReloadInterval is how often the configuration files are checked for
	// changes; 0 means every second, < 0 never (SIGHUP, through Reload, still
	// works).
	ReloadInterval  time.Duration
	ShutdownTimeout time.Duration // for draining in-flight requests; 10s when 0
	Logger          *slog.Logger

	// Connection shedding. For each duration 0 means its default and < 0
	// none; every one bounds how long a client can hold a connection (and a
	// descriptor) without using it.

	// HTTPReadTimeout bounds reading a whole HTTP request, header and body,
	// from its first byte (or from the end of the TLS handshake);
	// DefaultHTTPReadTimeout when 0. A client that withholds its body is
	// disconnected when it passes. The dashboard's event stream is exempt.
	HTTPReadTimeout time.Duration
	// HTTPWriteTimeout bounds an HTTP request from the end of its header to
	// the end of its answer, so it should exceed HTTPReadTimeout and the
	// store's timeout; DefaultHTTPWriteTimeout when 0. A client that stops
	// reading its answer is disconnected when it passes. The dashboard's
	// event stream gets it anew for each event.
	HTTPWriteTimeout time.Duration
	// HTTPIdleTimeout is how long a keep-alive connection may wait for its
	// next request; DefaultHTTPIdleTimeout when 0.
	HTTPIdleTimeout time.Duration
	// GRPCHandshakeTimeout bounds a new gRPC connection's TLS handshake and
	// HTTP/2 preface (grpc.ConnectionTimeout); DefaultGRPCHandshakeTimeout
	// when 0, grpc-go's own 120 s when < 0.
	GRPCHandshakeTimeout time.Duration
	// GRPCMaxConnIdle closes, with a GOAWAY, a gRPC connection that has had
	// no call in flight for that long (keepalive.ServerParameters
	// .MaxConnectionIdle); DefaultGRPCMaxConnIdle when 0.
	GRPCMaxConnIdle time.Duration
	// GRPCMaxStreams caps the calls in flight on one gRPC connection
	// (grpc.MaxConcurrentStreams; clients queue or open another connection
	// beyond it); DefaultGRPCMaxStreams when 0, none when < 0.
	GRPCMaxStreams int
	// MaxConns caps the connections open on the HTTP and gRPC listeners
	// together. At the cap, the connection idle the longest is closed to
	// admit a new one; when every one is serving a request, the new one is
	// closed at once. 0 derives the cap from the process's descriptor limit
	// (RLIMIT_NOFILE, less headroom for the store, reloads and probes: 1708
	// of 2048 with GOMAXPROCS 2); < 0 means no cap.
	MaxConns int
}

// Defaults of the connection-shedding settings of Config.
const (
	DefaultHTTPReadTimeout      = 10 * time.Second
	DefaultHTTPWriteTimeout     = 30 * time.Second
	DefaultHTTPIdleTimeout      = 2 * time.Minute
	DefaultGRPCHandshakeTimeout = 10 * time.Second
	DefaultGRPCMaxConnIdle      = 5 * time.Minute
	DefaultGRPCMaxStreams       = 1000
)

// grpcKeepalive is the keepalive policy clients must follow: a ping at most
// every 10 s (grpc-go clients never ping more often), idle connections
// included; more often, the server sends GOAWAY (too_many_pings) and closes
// the connection.
var grpcKeepalive = keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}

// orDefault resolves a Config duration: def when 0, none (0) when < 0.
func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// Server runs the decision service over HTTP and gRPC, with configuration
// reloads. Create it with New, then Serve.
type Server struct {
	cfg     Config
	auth    *auth.Authenticator // the tokens calls must carry, when any
	svc     *Service
	log     *slog.Logger
	metrics *Metrics
	health  *health.Server
	dash    *dashboard.Dashboard

	httpLn, grpcLn net.Listener
	httpSrv        *http.Server
	grpcSrv        *grpc.Server
	rlqs           *RLQS
	conns          *connlimit.Limit // over both listeners
	watches        healthWatches    // the health service's Watch calls, ended at shutdown

	draining  atomic.Bool // set on shutdown: health checks fail
	storeDown atomic.Bool // EnvoyOptions.HealthFollowsStore: the last probe failed

	reloadMu sync.Mutex
	version  string
	rejected string // fingerprint of the last rejected configuration, counted and logged once

	tokensData     []byte // the tokens file as last loaded (auth.go)
	tokensRejected string // the error of its last rejected version, logged once

	xds          *xds.Client   // the xDS configuration source, or nil
	xdsFirst     chan struct{} // closed once the first push is applied
	xdsFirstOnce sync.Once
}

// New loads the configuration (an invalid one is an error naming file, line
// and problem), opens the listeners and returns a Server ready to Serve.
func New(c Config) (*Server, error) {
	if c.ConfigPath == "" && c.XDS == nil {
		return nil, errors.New("server: no configuration path")
	}
	if c.Backend == nil {
		return nil, errors.New("server: no backend")
	}
	if c.HTTPAddr == "" && c.GRPCAddr == "" {
		return nil, errors.New("server: neither an HTTP nor a gRPC address")
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return nil, errors.New("server: TLS needs both a certificate and a key file")
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.ReloadInterval == 0 {
		c.ReloadInterval = time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: c, log: c.Logger, metrics: NewMetrics()}
	s.auth = auth.NewAuthenticator(c.Token, c.TokensFile != "")
	if c.TokensFile != "" {
		if err := s.loadTokens(); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	opts := c.Service
	opts.Metrics, opts.Logger = s.metrics, c.Logger
	svc, err := NewService(c.Backend, opts)
	if err != nil {
		return nil, err
	}
	s.svc = svc
	s.dash = newDashboard(svc, s.metrics)
	if c.XDS != nil {
		s.xdsFirst = make(chan struct{})
		if s.xds, err = xds.New(*c.XDS, s.applyXDS, c.Logger); err != nil {
			return nil, err
		}
	} else if err := s.Reload(); err != nil {
		if !opts.Envoy.Enabled {
			return nil, err
		}
		// envoyproxy/ratelimit starts without a configuration and answers
		// "no rate limit configuration loaded" until a valid one is read.
		s.metrics.reload(false)
		s.svc.envoyConfigRejected()
		s.log.Error("the configuration is invalid; serving without one until it is fixed (envoy compatibility)", "path", c.ConfigPath, "error", err)
	}
	maxConns := c.MaxConns
	if maxConns == 0 {
		maxConns = connlimit.DefaultMax()
	}
	s.conns = connlimit.New(s.metrics.Registry, maxConns, "http", "grpc")

	httpTLS, grpcTLS, err := listenerTLS(c) // tlsreload.go
	if err != nil {
		return nil, err
	}
	if c.TLSGRPCOnly {
		httpTLS = nil
	}
	if c.HTTPAddr != "" {
		ln, err := listen(c.HTTPAddr)
		if err != nil {
			return nil, fmt.Errorf("server: HTTP: %w", err)
		}
		ln = s.conns.Wrap(ln, "http")
		if httpTLS != nil {
			ln = tls.NewListener(ln, httpTLS)
		}
		s.httpLn = ln
		s.dash.WriteTimeout = orDefault(c.HTTPWriteTimeout, DefaultHTTPWriteTimeout)
		s.httpSrv = &http.Server{
			Handler:      api.AnswerEarly(NewHTTPHandler(svc, HTTPOptions{MaxBodyBytes: c.MaxBodyBytes, auth: s.auth, dash: s.dash, healthy: s.Healthy})),
			ReadTimeout:  orDefault(c.HTTPReadTimeout, DefaultHTTPReadTimeout),
			WriteTimeout: s.dash.WriteTimeout,
			IdleTimeout:  orDefault(c.HTTPIdleTimeout, DefaultHTTPIdleTimeout),
			ConnState:    s.conns.ConnState,
			ErrorLog:     slog.NewLogLogger(c.Logger.Handler(), slog.LevelWarn),
		}
		if s.httpSrv.ReadTimeout == 0 {
			s.httpSrv.ReadHeaderTimeout = DefaultHTTPReadTimeout // the body unbounded, the header still not
		}
	}
	if c.GRPCAddr != "" {
		ln, err := listen(c.GRPCAddr)
		if err != nil {
			s.closeListeners()
			return nil, fmt.Errorf("server: gRPC: %w", err)
		}
		s.grpcLn = s.conns.Wrap(ln, "grpc")
		var interceptors []grpc.UnaryServerInterceptor
		if es := c.Service.EnvoyStats; es != nil {
			interceptors = append(interceptors, envoy.StatsInterceptor(es))
		}
		interceptors = append(interceptors, s.conns.Unary)
		streamInterceptors := []grpc.StreamServerInterceptor{s.conns.Stream, s.watches.stream}
		if s.auth.Enabled() {
			interceptors = append(interceptors, tokenInterceptor(s.auth, s.metrics))
			streamInterceptors = append(streamInterceptors, tokenStreamInterceptor(s.auth, s.metrics))
		}
		gopts := []grpc.ServerOption{
			grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: orDefault(c.GRPCMaxConnIdle, DefaultGRPCMaxConnIdle)}),
			grpc.KeepaliveEnforcementPolicy(grpcKeepalive),
			grpc.ChainUnaryInterceptor(interceptors...),
			grpc.ChainStreamInterceptor(streamInterceptors...),
			grpc.MaxRecvMsgSize(int(c.MaxBodyBytes)),
			// Handlers run on long-lived workers rather than a new goroutine
			// per call: a new goroutine grows its stack on every call, which
			// cost about 15% of the server's CPU. A call finding every worker
			// busy still gets a goroutine of its own.
			grpc.NumStreamWorkers(streamWorkers),
			// ShouldRateLimit's messages are read and written by hand
			// (package api); every other message by the proto codec.
			grpc.ForceServerCodecV2(rlswire.NewCodec()),
		}
		if d := orDefault(c.GRPCHandshakeTimeout, DefaultGRPCHandshakeTimeout); d > 0 {
			gopts = append(gopts, grpc.ConnectionTimeout(d))
		}
		switch {
		case c.GRPCMaxStreams == 0:
			gopts = append(gopts, grpc.MaxConcurrentStreams(DefaultGRPCMaxStreams))
		case c.GRPCMaxStreams > 0:
			gopts = append(gopts, grpc.MaxConcurrentStreams(uint32(min(uint64(c.GRPCMaxStreams), math.MaxUint32))))
		}
		if grpcTLS != nil {
			gopts = append(gopts, grpc.Creds(credentials.NewTLS(grpcTLS)))
		}
		s.grpcSrv = grpc.NewServer(gopts...)
		api.RegisterWire(s.grpcSrv, NewRLS(svc))
		s.rlqs = NewRLQS(svc)
		rlqs.RegisterRateLimitQuotaServiceServer(s.grpcSrv, s.rlqs)
		s.health = health.NewServer()
		healthpb.RegisterHealthServer(s.grpcSrv, s.health)
	}
	return s, nil
}

// tokenStreamInterceptor is tokenInterceptor for streaming calls (RLQS's
// StreamRateLimitQuotas), with the health service's Watch exempt.
func tokenStreamInterceptor(a *auth.Authenticator, m *Metrics) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if strings.HasPrefix(info.FullMethod, "/grpc.health.v1.Health/") {
			return handler(srv, ss)
		}
		sc, err := grpcScope(ss.Context(), a, m)
		if err != nil {
			return err
		}
		return handler(srv, &scopedStream{ss, auth.With(ss.Context(), sc)})
	}
}

// scopedStream is a stream whose context carries its token's scope.
type scopedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *scopedStream) Context() context.Context { return s.ctx }

// tokenInterceptor requires "authorization: Bearer <token>" metadata, except
// on the health service, and gives the call its token's scope (auth.From).
func tokenInterceptor(a *auth.Authenticator, m *Metrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if strings.HasPrefix(info.FullMethod, "/grpc.health.v1.Health/") {
			return handler(ctx, req)
		}
		sc, err := grpcScope(ctx, a, m)
		if err != nil {
			return nil, err
		}
		return handler(auth.With(ctx, sc), req)
	}
}

// grpcScope is the scope of the token of a gRPC call's metadata, or an
// Unauthenticated error.
func grpcScope(ctx context.Context, a *auth.Authenticator, m *Metrics) (*auth.Scope, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) == 1 {
		if sc, ok := a.Check(v[0]); ok {
			return sc, nil
		}
	}
	m.requests.WithLabelValues("grpc", "unauthorized").Inc()
	return nil, status.Error(codes.Unauthenticated, "missing or wrong bearer token")
}

// HealthService is the gRPC health service name envoyproxy/ratelimit
// reports its health under (and floodgate too): SERVING while Healthy.
const HealthService = "ratelimit"

// Healthy reports the health envoyproxy/ratelimit's checks report (gRPC
// Health.Check of service "ratelimit", GET /healthcheck): false once the
// server is shutting down and, in envoy compatibility mode with
// HealthyWithAtLeastOneConfig, until a configuration with a domain is
// loaded.
func (s *Server) Healthy() bool {
	return !s.draining.Load() && !s.storeDown.Load() && s.svc.envoyHealthy()
}

// probeStore checks, every HealthProbeInterval until ctx ends, that the
// store answers (a peek of a fixed window, within the store timeout), and
// publishes the health when that changes (EnvoyOptions.HealthFollowsStore).
func (s *Server) probeStore(ctx context.Context) {
	probe, err := ratelimit.New(s.cfg.Backend, ratelimit.FixedWindow{Limit: 1, Window: time.Second})
	if err != nil {
		s.log.Error("store health probe", "error", err)
		return
	}
	timeout := max(s.cfg.Service.Timeout, 100*time.Millisecond)
	t := time.NewTicker(HealthProbeInterval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		_, err := probe.AllowN(pctx, "envoy-health-probe", 0)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if down := err != nil; s.storeDown.Swap(down) != down {
			if down {
				s.log.Warn("the store does not answer: health checks fail until it does (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION)", "error", err)
			} else {
				s.log.Info("the store answers again: health checks pass")
			}
			s.setHealth()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// setHealth publishes Healthy on the gRPC health service.
func (s *Server) setHealth() {
	if s.health == nil {
		return
	}
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if s.Healthy() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus(HealthService, st)
}

// Service returns the decision service.
func (s *Server) Service() *Service { return s.svc }

// Metrics returns the server's metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

// HTTPAddr returns the address the HTTP API listens on ("" when none).
func (s *Server) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}

// GRPCAddr returns the address the gRPC API listens on ("" when none).
func (s *Server) GRPCAddr() string {
	if s.grpcLn == nil {
		return ""
	}
	return s.grpcLn.Addr().String()
}

// Reload reads the configuration again and, when it is valid and changed,
// serves it from the next request on. An invalid configuration is logged and
// returned; the previous one keeps serving.
//
// Each rejected configuration counts once as a failed reload (and is logged
// once), however often it is checked again unchanged: rejections are told
// apart by the files' fingerprint, or by the error when the files cannot be
// read, so two different bad configurations with the same error count twice.
func (s *Server) Reload() error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	s.reloadTokens()
	if s.xds != nil {
		return nil // the management server pushes
	}
	version, err := fingerprint(s.cfg.ConfigPath)
	if err == nil && version == s.version {
		s.rejected = "" // back to the configuration being served
		return nil
	}
	rejected := version
	if err != nil {
		rejected = "unreadable: " + err.Error()
	}
	var cfg *config.Config
	if err == nil {
		opts := s.loadOptions()
		opts.EmptyDirectory = s.cfg.Service.Envoy.Enabled
		cfg, err = config.LoadWith(s.cfg.ConfigPath, opts)
	}
	if err == nil {
		err = s.svc.SetConfig(cfg, version)
	}
	if err != nil {
		if rejected != s.rejected && (s.version != "" || s.rejected != "") {
			// Not the first load, which New counts.
			s.svc.envoyConfigRejected()
		}
		if s.version != "" && rejected != s.rejected {
			s.metrics.reload(false)
			s.log.Error("configuration rejected; the previous one keeps serving", "path", s.cfg.ConfigPath, "error", err)
		}
		s.rejected = rejected
		return err
	}
	s.rejected = ""
	s.setHealth()
	s.metrics.reload(true)
	s.log.Info("configuration loaded", "path", s.cfg.ConfigPath, "version", version, "domains", len(cfg.Domains))
	s.version = version
	return nil
}

// fingerprint is a digest of the configuration files' names and contents.
func fingerprint(path string) (string, error) {
	files := []string{path}
	if fi, err := os.Stat(path); err != nil {
		return "", err
	} else if fi.IsDir() {
		ents, err := os.ReadDir(path)
		if err != nil {
			return "", err
		}
		files = files[:0]
		for _, e := range ents {
			// Only the files config.Load reads: an editor's swap file or a
			// README must not trigger reloads (or fail them when unreadable).
			name := e.Name()
			ext := strings.ToLower(filepath.Ext(name))
			if strings.HasPrefix(name, ".") || ext != ".yaml" && ext != ".yml" {
				continue
			}
			files = append(files, filepath.Join(path, name))
		}
		sort.Strings(files)
	}
	h := sha256.New()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			if fi, serr := os.Stat(f); serr == nil && fi.IsDir() {
				continue
			}
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(f), len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// Serve serves until ctx ends, then fails the health checks, stops
// accepting requests, drains the in-flight ones (up to ShutdownTimeout) and
// returns. In envoy compatibility mode the gRPC API drains first while the
// HTTP API still answers (its /healthcheck failing), as envoyproxy/ratelimit
// does; then the HTTP API. It returns early with
// an error when a listener fails.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 2)
	if s.xds != nil {
		xctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go s.xds.Run(xctx)
		if s.cfg.XDS.WaitFirst {
			s.log.Info("xDS: waiting for the first configuration before serving", "xds", s.cfg.XDS.Address)
			select {
			case <-s.xdsFirst:
			case <-ctx.Done():
				s.closeListeners()
				return nil
			}
		}
	}
	if s.httpSrv != nil {
		go func() {
			if err := s.httpSrv.Serve(s.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("server: HTTP: %w", err)
			}
		}()
	}
	if s.grpcSrv != nil {
		s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		s.health.SetServingStatus("envoy.service.ratelimit.v3.RateLimitService", healthpb.HealthCheckResponse_SERVING)
		s.health.SetServingStatus("envoy.service.rate_limit_quota.v3.RateLimitQuotaService", healthpb.HealthCheckResponse_SERVING)
		s.setHealth()
		go func() {
			if err := s.grpcSrv.Serve(s.grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				errc <- fmt.Errorf("server: gRPC: %w", err)
			}
		}()
	}
	if s.svc.degraded != nil && s.cfg.Service.Servers == 0 {
		hctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go s.heartbeat(hctx)
	}
	if e := s.cfg.Service.Envoy; e.Enabled && e.HealthFollowsStore {
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go s.probeStore(pctx)
	}
	var tick <-chan time.Time
	if s.cfg.ReloadInterval > 0 && (s.xds == nil || s.cfg.TokensFile != "") {
		t := time.NewTicker(s.cfg.ReloadInterval)
		defer t.Stop()
		tick = t.C
	}
	stopDash := make(chan struct{})
	dashDone := make(chan struct{})
	go func() { s.dash.Run(stopDash); close(dashDone) }()
	s.log.Info("serving", "http", s.HTTPAddr(), "grpc", s.GRPCAddr(), "max_conns", s.conns.Capacity())
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err = <-errc:
			break loop
		case <-tick:
			s.Reload() // logs a rejected configuration itself
		}
	}
	close(stopDash) // ends the dashboard's event streams, which would hold the drain
	<-dashDone
	s.shutdown()
	return err
}

// heartbeat tells the store every HeartbeatInterval that this server is
// live, and the service how many servers are (the failure mode
// FailDegraded's shares; degraded.Beater), until ctx ends.
func (s *Server) heartbeat(ctx context.Context) {
	degraded.NewBeater(s.cfg.Backend, HeartbeatInterval).Run(ctx, s.svc.setServers)
}

// HeartbeatInterval is how often a Server in the failure mode FailDegraded
// tells the store it is live; a server is counted live for three intervals
// after its last beat.
const HeartbeatInterval = time.Second

// shutdown stops both APIs, letting in-flight requests finish.
func (s *Server) shutdown() {
	s.draining.Store(true)
	s.setHealth()
	s.log.Info("shutting down; draining in-flight requests", "timeout", s.cfg.ShutdownTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	stopHTTP := func() {
		if s.httpSrv != nil {
			if err := s.httpSrv.Shutdown(ctx); err != nil {
				s.httpSrv.Close()
			}
		}
	}
	stopGRPC := func() {
		if s.grpcSrv == nil {
			return
		}
		done := make(chan struct{})
		go func() { s.grpcSrv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpcSrv.Stop()
		}
	}
	if s.grpcSrv != nil {
		s.health.Shutdown()
		// Their streams would hold GracefulStop until the timeout.
		s.watches.drain()
		s.rlqs.Close()
	}
	if s.cfg.Service.Envoy.Enabled {
		// As envoyproxy/ratelimit (f2fb157, src/server/server_impl.go
		// Stop): gRPC drains first while HTTP still answers, its
		// /healthcheck failing, so that probes see 500 rather than a
		// refused connection; then HTTP.
		stopGRPC()
		stopHTTP()
		return
	}
	var wg sync.WaitGroup
	wg.Go(stopHTTP)
	wg.Go(stopGRPC)
	wg.Wait()
	if err := s.svc.Close(ctx); err != nil {
		s.log.Warn("leases not given back at shutdown", "error", err)
	}
}

func (s *Server) closeListeners() {
	if s.httpLn != nil {
		s.httpLn.Close()
	}
	if s.grpcLn != nil {
		s.grpcLn.Close()
	}
}

// listen listens on a TCP address (host:port), or on a Unix socket given as
// unix:PATH or unix:///PATH. A stale socket file left by an earlier process
// is removed first.
func listen(addr string) (net.Listener, error) {
	path, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return net.Listen("tcp", addr)
	}
	path = strings.TrimPrefix(path, "//")
	if path == "" {
		return nil, fmt.Errorf("%q: the Unix socket needs a path (unix:///run/floodgate.sock)", addr)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another server is listening on this socket", path)
		}
		os.Remove(path)
	}
	return net.Listen("unix", path)
}

// newDashboard returns the dashboard of s, reading m.
func newDashboard(s *Service, m *Metrics) *dashboard.Dashboard {
	return dashboard.New(dashboard.Source{
		Gather:      m.own.Gather,
		BreakerOpen: s.breakerOpen,
		Config: func() (string, time.Time) {
			_, version, loaded := s.Config()
			return version, loaded
		},
		Top: s.top,
	})
}

// loadOptions are the configuration's parsing options, files' and xDS's:
// envoyproxy/ratelimit's rules in envoy compatibility mode.
func (s *Server) loadOptions() config.LoadOptions {
	e := &s.cfg.Service.Envoy
	return config.LoadOptions{MergeDomains: e.Enabled && e.MergeDomainConfig, Envoy: e.Enabled}
}
