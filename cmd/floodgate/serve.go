package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/server"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/envoystats"
	"github.com/floodgate-dev/floodgate/server/storeurl"
)

const serveUsage = `Usage: floodgate serve --config FILE|DIR [flags]
       floodgate serve --config-xds HOST:PORT [--config-xds-node-id ID] [flags]

Runs the decision server: Envoy's rate limit service over gRPC, and an HTTP
API (POST /json, POST /v1/check, /healthz, /readyz, /metrics). Without --redis
the limits live in this process (the embedded memory backend); with --redis
they live in Redis, and any number of servers share them.

The configuration is envoyproxy/ratelimit's YAML (a file, or a directory of
*.yaml files, one domain each) plus an algorithm per rate_limit. It is
reloaded when a file changes and on SIGHUP; a bad new configuration is logged
and the old one keeps serving. SIGINT or SIGTERM drains in-flight requests
and exits.

Flags:
%s
Redis URLs:
  redis://[user:pass@]host:6379[/db]        standalone, or a Cluster (detected by itself)
  rediss://host:6380                        TLS (--redis-tls-ca, --redis-tls-cert and --redis-tls-key:
                                            a private CA, a client certificate)
  redis://host1:7000,host2:7001             Cluster seed nodes
  redis+sentinel://host1:26379,host2:26379/mymaster[/db]   Sentinel
  unix:///run/redis.sock
--redis-persecond takes the same forms, for the limits whose period is one second
(envoyproxy/ratelimit's REDIS_PERSECOND), with companions of the same names.
A password is best given with --redis-password-file (or $FLOODGATE_REDIS_PASSWORD)
rather than in the URL, where process listings show it; URLs are always shown
with their passwords redacted.

Examples:
  floodgate serve --config examples/floodgate.yaml
  floodgate serve --config /etc/ratelimit/config/ --redis redis://localhost:6379 --failure-mode deny
  floodgate serve --config conf/ --grpc-addr :8081 --http-addr :8080 --token-file /run/secrets/token
  floodgate serve --config-xds xds.internal:18000 --config-xds-node-id ratelimit --redis redis://localhost:6379
`

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("floodgate serve")
	var (
		cfgPath       = fs.String("config", "", "configuration `file or directory` (required, unless --config-xds)")
		xdsf          = addXDSFlags(fs)
		httpAddr      = fs.String("http-addr", ":8080", "HTTP API `address` (host:port, or unix:PATH for a Unix socket); empty for none")
		grpcAddr      = fs.String("grpc-addr", ":8081", "gRPC (Envoy RLS v3) `address` (host:port, or unix:PATH); empty for none")
		mainStore     = addStoreFlags(fs, "redis", "the Redis", "Redis `URL`; empty for the embedded memory backend. Keep passwords out of it: see --redis-password-file", "FLOODGATE_REDIS_PASSWORD", "FLOODGATE_REDIS_SENTINEL_PASSWORD")
		psStore       = addStoreFlags(fs, "redis-persecond", "the per-second Redis", "Redis `URL` (the forms of --redis) of a second store, for the limits whose period is one second; empty to keep them with the others. Needs --redis. A request with limits on both stores is decided per store: see docs/server/stores.md", "FLOODGATE_REDIS_PERSECOND_PASSWORD", "FLOODGATE_REDIS_PERSECOND_SENTINEL_PASSWORD")
		psTimeout     = fs.Duration("redis-persecond-timeout", 0, "per-call `timeout` of the per-second store; 0 for --timeout's")
		redisURL      = mainStore.url
		memMax        = fs.Int64("memory-max-bytes", 0, "bound on the embedded memory backend's estimated state, in `bytes`: rate limit state beyond it is forgotten, expired first, then least recently used (those keys start afresh). 0 for the default (128 MiB, under 512 MB RSS), negative for no bound. Ignored with --redis")
		prefix        = fs.String("redis-prefix", "floodgate", "prefix of every Redis key")
		timeout       = fs.Duration("timeout", server.DefaultTimeout, "per-call store `timeout`")
		failMode      = fs.String("failure-mode", "degraded", "answer when the store fails: degraded (keep limiting in process, each server its share of every limit), allow, deny, or error (let Envoy's failure_mode_deny decide)")
		servers       = fs.Int("servers", 0, "with --failure-mode degraded, how many servers share the store (each limits its share); 0 to count them by their heartbeats in the store")
		leases        = fs.Bool("leases", false, "decide hot keys from quota leases: a store call takes a lease of several units of a key's budget, sized by the rate this server sees for it, and the server decides from it in process (a key decided rarely is decided as without leases). Applies to every limit that can lease unless its YAML says lease: false; see docs/server/leases.md")
		brkFailures   = fs.Int("breaker-failures", 5, "consecutive store failure events that open the circuit breaker (calls that fail together, as in one stall, count once); -1 disables it")
		brkCooldown   = fs.Duration("breaker-cooldown", 100*time.Millisecond, "longest wait between an open breaker's probes of the store: the first comes after --timeout, and the wait doubles up to this while they fail; the store, once back, decides again within about this")
		tokenFile     = fs.String("token-file", "", "`file` holding a bearer token required on HTTP and gRPC, allowed every domain (also $FLOODGATE_TOKEN)")
		tokensFile    = fs.String("tokens-file", "", "YAML `file` of bearer tokens, each allowed some domains (tokens: [{name, sha256, domains}]): calls must carry one of them (or --token-file's), and a token may use only its domains; reloaded with the configuration. See docs/server/operations.md")
		tlsCert       = fs.String("tls-cert", "", "TLS certificate `file` (with --tls-key: TLS on both APIs)")
		tlsKey        = fs.String("tls-key", "", "TLS private key `file`")
		tlsGRPCOnly   = fs.Bool("tls-grpc-only", false, "with --tls-cert, TLS (and --tls-client-ca) on the gRPC API only; HTTP stays plaintext")
		tlsClientCA   = fs.String("tls-client-ca", "", "CA certificates `file` (PEM): with --tls-cert, both APIs require a client certificate signed by one of them (mutual TLS). Certificate, key and CA files are reloaded when they change")
		tlsClientSAN  = fs.String("tls-client-san", "", "with --tls-client-ca, admit only client certificates carrying this subject alternative `name` (DNS name, IP, URI or e-mail)")
		maxBody       = fs.Int64("max-body-bytes", server.DefaultMaxBodyBytes, "largest HTTP body or gRPC message")
		maxDesc       = fs.Int("max-descriptors", server.DefaultMaxDescriptors, "most descriptors in one request")
		quotaTTL      = fs.Duration("quota-ttl", server.DefaultQuotaTTL, "time to live of the assignments of Envoy's rate limit quota service (RLQS, on the gRPC port), rounded up to whole seconds; each bucket's is at least 1.5 times its data plane's reporting interval. A data plane that goes quiet gives its share back when it passes")
		localCache    = fs.Int("local-cache-bytes", 0, "size in `bytes` of the local over-limit cache: keys the store denied are answered OVER_LIMIT in process, without a store call, until their limit admits again (at least 512 KiB is used); 0 for none")
		reloadEvery   = fs.Duration("reload-interval", time.Second, "how often to look for configuration changes; 0 only on SIGHUP")
		shutdownAfter = fs.Duration("shutdown-timeout", 10*time.Second, "how long to drain in-flight requests on exit")
		httpRead      = fs.Duration("http-read-timeout", server.DefaultHTTPReadTimeout, "longest time to read an HTTP request, header and body; negative for none")
		httpWrite     = fs.Duration("http-write-timeout", server.DefaultHTTPWriteTimeout, "longest time from an HTTP request's header to the end of its answer (the dashboard's stream: per event); negative for none")
		httpIdle      = fs.Duration("http-idle-timeout", server.DefaultHTTPIdleTimeout, "how long an idle HTTP keep-alive connection stays open; negative for no limit")
		grpcHandshake = fs.Duration("grpc-handshake-timeout", server.DefaultGRPCHandshakeTimeout, "longest time for a new gRPC connection's TLS handshake and HTTP/2 preface")
		grpcIdle      = fs.Duration("grpc-max-idle", server.DefaultGRPCMaxConnIdle, "close a gRPC connection with no call in flight for this long; negative for never")
		grpcStreams   = fs.Int("grpc-max-streams", server.DefaultGRPCMaxStreams, "most calls in flight on one gRPC connection; negative for no limit")
		maxConns      = fs.Int("max-conns", 0, "most connections open on the HTTP and gRPC listeners together, idle ones shed first; 0 from the descriptor limit (ulimit -n), negative for no limit")
		logFormat     = fs.String("log-format", "text", "log format: text or json")
		logLevel      = fs.String("log-level", "info", "log level: debug, info, warn or error")
		compat        = fs.String("compat", "", "compatibility `mode`: envoy selects envoyproxy/ratelimit's behaviour and reads its environment variables (also $FLOODGATE_COMPAT); empty for floodgate's own")
		tracing       tracingFlags
		debugAddr     = fs.String("debug-addr", "", "`address` of a profiling endpoint (/debug/pprof/, Go's net/http/pprof); empty for none. Loopback only, unless a token is set, which it then requires too")
	)
	fs.BoolVar(&tracing.enabled, "tracing", false, "export OpenTelemetry spans over OTLP, to the endpoint of $OTEL_EXPORTER_OTLP_ENDPOINT (or the exporter's default); the other OTEL_EXPORTER_OTLP_* variables are honoured too")
	fs.StringVar(&tracing.endpoint, "otlp-endpoint", "", "OTLP collector `URL` (http://host:4318, or http://host:4317 with --tracing-protocol grpc); implies --tracing")
	fs.StringVar(&tracing.protocol, "tracing-protocol", "", "OTLP `protocol`: http or grpc (default $OTEL_EXPORTER_OTLP_PROTOCOL, else http)")
	fs.Float64Var(&tracing.samplingRate, "tracing-sampling-rate", 1, "share of the traces this server starts that are sampled, 0 to 1; a caller's traceparent decides for its own")
	fs.StringVar(&tracing.serviceName, "tracing-service-name", "", "service.name of the spans (default $OTEL_SERVICE_NAME, else floodgate)")
	fs.StringVar(&tracing.serviceNamespace, "tracing-service-namespace", "", "service.namespace of the spans")
	fs.StringVar(&tracing.instanceID, "tracing-service-instance-id", "", "service.instance.id of the spans (default a random UUID)")
	fs.BoolVar(&tracing.descriptorValues, "tracing-descriptor-values", false, "record the descriptors' entries (key=value, possibly user data) on the spans")
	help := fmt.Sprintf(serveUsage, flagDefaults(fs))
	rest, code, done := parse(fs, args, true, help, stdout, stderr)
	if done {
		return code
	}
	if len(rest) > 0 {
		return usageError(stderr, "floodgate serve", fmt.Sprintf("unexpected argument %q", rest[0]))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if !given["compat"] {
		*compat = os.Getenv("FLOODGATE_COMPAT")
	}
	var envoy *envoySettings
	switch *compat {
	case "":
	case "envoy":
		es, err := readEnvoyEnv(os.LookupEnv)
		if err != nil {
			fmt.Fprintf(stderr, "floodgate serve: envoy compatibility: %v\n", err)
			return exitFailure
		}
		for name, v := range es.flags {
			if name == "config" && given["config-xds"] || strings.HasPrefix(name, "config-xds") && given["config"] {
				continue // a configuration source given as a flag wins over CONFIG_TYPE
			}
			if !given[name] {
				if err := fs.Set(name, v); err != nil {
					fmt.Fprintf(stderr, "floodgate serve: envoy compatibility: --%s from the environment: %v\n", name, err)
					return exitFailure
				}
			}
		}
		if !given["failure-mode"] {
			*failMode = "error" // envoyproxy/ratelimit answers a Redis failure with an error
		}
		envoy = es
	default:
		return usageError(stderr, "floodgate serve", fmt.Sprintf("--compat %q: want envoy, or nothing", *compat))
	}
	xdsOpts, err := xdsf.options()
	if err != nil {
		return usageError(stderr, "floodgate serve", err.Error())
	}
	if *cfgPath != "" && xdsOpts != nil {
		return usageError(stderr, "floodgate serve", "--config and --config-xds exclude each other: the configuration comes from files or from an xDS management server")
	}
	if *cfgPath == "" && xdsOpts == nil {
		return usageError(stderr, "floodgate serve", "--config is required (a file or a directory of *.yaml files; try examples/floodgate.yaml), or --config-xds (an xDS management server)")
	}
	mode, err := server.ParseFailureMode(*failMode)
	if err != nil {
		return usageError(stderr, "floodgate serve", "--failure-mode: "+err.Error())
	}
	logger, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		return usageError(stderr, "floodgate serve", err.Error())
	}
	token, err := readSecret("--token-file", *tokenFile, "FLOODGATE_TOKEN")
	if err != nil {
		fmt.Fprintf(stderr, "floodgate serve: %v\n", err)
		return exitFailure
	}
	redisPass, sentinelPass, err := mainStore.passwords()
	if err != nil {
		fmt.Fprintf(stderr, "floodgate serve: %v\n", err)
		return exitFailure
	}
	psPass, psSentinelPass, err := psStore.passwords()
	if err != nil {
		fmt.Fprintf(stderr, "floodgate serve: %v\n", err)
		return exitFailure
	}
	svcOpts := server.Options{}
	if envoy != nil {
		// REDIS_AUTH and REDIS_SENTINEL_AUTH, unless floodgate's own are given.
		if redisPass == "" && *redisURL != "" {
			redisPass = envoy.redisPassword
		}
		if sentinelPass == "" && *redisURL != "" {
			sentinelPass = envoy.sentinelPassword
		}
		// REDIS_PERSECOND_AUTH and REDIS_PERSECOND_SENTINEL_AUTH.
		if psPass == "" && *psStore.url != "" {
			psPass = envoy.psPassword
		}
		if psSentinelPass == "" && *psStore.url != "" {
			psSentinelPass = envoy.psSentinelPassword
		}
		svcOpts.Envoy = envoy.envoy
		svcOpts.NearLimitRatio = envoy.nearLimitRatio
		for _, n := range envoy.notices {
			logger.Warn("envoy compatibility: " + n)
		}
	}
	if (redisPass != "" || sentinelPass != "") && *redisURL == "" {
		return usageError(stderr, "floodgate serve", "a Redis password is given but no --redis URL")
	}
	if *psStore.url == "" {
		if psPass != "" || psSentinelPass != "" || psStore.tlsGiven() || *psTimeout != 0 {
			return usageError(stderr, "floodgate serve", "a per-second store option (a password, TLS, --redis-persecond-timeout) is given but no --redis-persecond URL")
		}
	} else if *redisURL == "" || *redisURL == "memory://" || *redisURL == "memory" {
		return usageError(stderr, "floodgate serve", "--redis-persecond needs --redis: the per-second limits go to a Redis of their own, the others to --redis's")
	} else if u := *psStore.url; u == "memory://" || u == "memory" {
		return usageError(stderr, "floodgate serve", "--redis-persecond names a Redis (the forms of --redis), not the memory backend")
	}
	if *psTimeout < 0 {
		return usageError(stderr, "floodgate serve", "--redis-persecond-timeout must not be negative")
	}
	tp, err := newTracerProvider(context.Background(), &tracing, os.Getenv)
	if err != nil {
		return usageError(stderr, "floodgate serve", err.Error())
	}
	if tp != nil {
		defer func() {
			// The last spans are sent before exit, for at most five seconds.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(ctx); err != nil {
				logger.Warn("tracing: spans not sent at exit", "error", err)
			}
		}()
		svcOpts.Tracing = server.TracingOptions{Provider: tp, DescriptorValues: tracing.descriptorValues}
		logger.Info("tracing: OpenTelemetry spans over OTLP", "sampling_rate", tracing.samplingRate)
	}
	var debugLn net.Listener
	if *debugAddr != "" {
		// Before the store and the listeners: a refused address is a usage
		// error, found before anything starts.
		if debugLn, err = listenDebug(*debugAddr, token != ""); err != nil {
			fmt.Fprintf(stderr, "floodgate serve: --debug-addr: %v\n", err)
			return exitFailure
		}
		defer debugLn.Close()
	}
	interval := *reloadEvery
	if interval == 0 {
		interval = -1
	}

	// Signals from here on end the server (or the wait for the stores).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var startup *envoyStartup // envoy mode: wait for the stores as envoy does
	if envoy != nil {
		startup = &envoy.startup
	}
	b, closer, err := openWaiting(ctx, startup, logger, func() (backend.Backend, io.Closer, error) {
		return mainStore.open(*prefix, max(*timeout, 2*time.Second), redisPass, sentinelPass, logger, backend.WithMaxBytes(*memMax))
	})
	if err != nil {
		fmt.Fprintf(stderr, "floodgate serve: %v\nCheck that Redis runs at that address, or leave out --redis to keep limits in this process.\n", err)
		return exitFailure
	}
	defer closer.Close()
	var psBackend backend.Backend
	if *psStore.url != "" {
		// The same prefix: the keys of the two stores never meet.
		pb, pc, err := openWaiting(ctx, startup, logger, func() (backend.Backend, io.Closer, error) {
			return psStore.open(*prefix, max(*psTimeout, *timeout, 2*time.Second), psPass, psSentinelPass, logger)
		})
		if err != nil {
			fmt.Fprintf(stderr, "floodgate serve: %v\nCheck that Redis runs at that address, or leave out --redis-persecond to keep the per-second limits in --redis's.\n", err)
			return exitFailure
		}
		defer pc.Close()
		psBackend = pb
	}
	if envoy != nil && envoy.stats != nil {
		// envoyproxy/ratelimit's stats to StatsD; closed (a last flush)
		// after the server has stopped.
		o := *envoy.stats
		o.NearLimitRatio, o.Logger = envoy.nearLimitRatio, logger
		es, err := envoystats.New(o)
		if err != nil {
			fmt.Fprintf(stderr, "floodgate serve: envoy compatibility: stats: %v\n", err)
			return exitFailure
		}
		defer es.Close()
		svcOpts.EnvoyStats = es
		logger.Info("envoy compatibility: stats to StatsD", "address", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)), "dogstatsd", o.DogStatsD, "flush_interval", o.FlushInterval.String())
	}

	srv, err := server.New(server.Config{
		ConfigPath: *cfgPath,
		XDS:        xdsOpts,
		HTTPAddr:   *httpAddr,
		GRPCAddr:   *grpcAddr,
		Backend:    b,
		Service: server.Options{
			Timeout:         *timeout,
			FailureMode:     mode,
			Servers:         *servers,
			Leases:          *leases,
			MaxDescriptors:  *maxDesc,
			Breaker:         server.BreakerOptions{Failures: *brkFailures, Cooldown: *brkCooldown},
			NearLimitRatio:  svcOpts.NearLimitRatio,
			Envoy:           svcOpts.Envoy,
			EnvoyStats:      svcOpts.EnvoyStats,
			LocalCacheBytes: *localCache,
			Tracing:         svcOpts.Tracing,

			PerSecondBackend: psBackend,
			PerSecondTimeout: *psTimeout,
			Quota:            server.QuotaOptions{TTL: *quotaTTL},
		},
		Token:           token,
		TokensFile:      *tokensFile,
		TLSCertFile:     *tlsCert,
		TLSGRPCOnly:     *tlsGRPCOnly,
		TLSKeyFile:      *tlsKey,
		TLSClientCAFile: *tlsClientCA,
		TLSClientSAN:    *tlsClientSAN,
		MaxBodyBytes:    *maxBody,
		ReloadInterval:  interval,
		ShutdownTimeout: *shutdownAfter,
		Logger:          logger,

		HTTPReadTimeout:      *httpRead,
		HTTPWriteTimeout:     *httpWrite,
		HTTPIdleTimeout:      *httpIdle,
		GRPCHandshakeTimeout: *grpcHandshake,
		GRPCMaxConnIdle:      *grpcIdle,
		GRPCMaxStreams:       *grpcStreams,
		MaxConns:             *maxConns,
	})
	if err != nil {
		var list config.ErrorList
		if errors.As(err, &list) {
			for _, e := range list {
				fmt.Fprintln(stderr, e)
			}
			fmt.Fprintf(stderr, "floodgate serve: the configuration is invalid (%d problems); fix them and run 'floodgate config check %s'\n", len(list), *cfgPath)
			return exitFailure
		}
		fmt.Fprintf(stderr, "floodgate serve: %v\n", err)
		if errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(stderr, "--config needs a configuration file, or a directory of *.yaml files; examples/floodgate.yaml is one.\n")
		}
		return exitFailure
	}
	backendName := "memory"
	if *redisURL != "" {
		backendName = "redis"
	}
	info, _ := debug.ReadBuildInfo()
	attrs := []any{"version", versionString(info), "backend", backendName, "store", storeurl.Redact(*redisURL)}
	if *psStore.url != "" {
		psT := *psTimeout
		if psT == 0 {
			psT = *timeout
		}
		attrs = append(attrs, "persecond_store", storeurl.Redact(*psStore.url), "persecond_timeout", psT)
	}
	logger.Info("floodgate starting", append(attrs, "http", srv.HTTPAddr(), "grpc", srv.GRPCAddr(), "failure_mode", mode.String(), "timeout", *timeout, "compat", *compat)...)

	if debugLn != nil {
		go func() { _ = http.Serve(debugLn, debugHandler(token)) }()
		logger.Info("profiling endpoint", "addr", debugLn.Addr().String(), "token_required", token != "")
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := srv.Reload(); err == nil {
					logger.Info("SIGHUP: configuration checked")
				}
			}
		}
	}()
	if err := srv.Serve(ctx); err != nil {
		fmt.Fprintf(stderr, "floodgate serve: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// newLogger returns a slog logger writing to w.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// flagDefaults lists fs's flags for a help text.
func flagDefaults(fs interface {
	SetOutput(io.Writer)
	PrintDefaults()
}) string {
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	return b.String()
}

// pprofMux serves Go's profiles under /debug/pprof/, on a mux of its own so
// that they are never on the API's address. The command line it shows has
// its passwords redacted.
func pprofMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", cmdline) // passwords redacted
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// readSecret returns a secret from file (trimmed of surrounding space) or,
// when no file is named, from the environment variable env; "" when
// neither gives one. A named file that cannot be read or is empty is an
// error naming flag.
func readSecret(flag, file, env string) (string, error) {
	if file == "" {
		return strings.TrimSpace(os.Getenv(env)), nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	v := strings.TrimSpace(string(data))
	if v == "" {
		return "", fmt.Errorf("%s %s is empty", flag, file)
	}
	return v, nil
}

// openWaiting opens a store with open. With startup (envoy mode), a store
// that does not answer (storeurl.ErrUnreachable) is tried again as
// envoyproxy/ratelimit does (REDIS_STARTUP_*), each failure logged, until it
// answers, startup.Elapsed has passed (when not 0) or ctx ends (a signal);
// other errors, and every error without startup, are returned at once.
func openWaiting(ctx context.Context, startup *envoyStartup, logger *slog.Logger, open func() (backend.Backend, io.Closer, error)) (backend.Backend, io.Closer, error) {
	start := time.Now()
	for n := 1; ; n++ {
		b, c, err := open()
		if err == nil || startup == nil || !errors.Is(err, storeurl.ErrUnreachable) {
			return b, c, err
		}
		elapsed := time.Since(start)
		if startup.Elapsed > 0 && elapsed >= startup.Elapsed {
			return nil, nil, fmt.Errorf("%w (gave up after %s: REDIS_STARTUP_MAX_ELAPSED_TIME)", err, elapsed.Round(time.Millisecond))
		}
		d := startup.wait(n, rand.Float64())
		logger.Warn("envoy compatibility: Redis does not answer; trying again before serving (REDIS_STARTUP_*)",
			"error", err, "retry_in", d.Round(time.Millisecond), "elapsed", elapsed.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("%w (stopped by a signal while waiting for it)", err)
		case <-time.After(d):
		}
	}
}
