package main

import (
	"fmt"
	"math"
	neturl "net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/server"
	"github.com/floodgate-dev/floodgate/server/envoystats"
)

// envoyproxy/ratelimit's environment variables (src/settings/settings.go at
// commit f2fb157), read by `floodgate serve --compat envoy` and by nothing
// else. Each is honoured (mapped to a flag or an option), accepted and
// ignored (a notice naming it is logged once at start when it is set), or
// refused (when set to a value floodgate cannot serve as envoy would, start-up
// fails with an error naming it). Flags given on the command line win over
// the variables.

// envHandling is what floodgate does with one of envoy's variables.
type envHandling int

const (
	envHonoured envHandling = iota // mapped to a flag or an option
	envIgnored                     // accepted; a notice when set
	envRefused                     // refused when set to a value it cannot serve (see note)
)

func (h envHandling) String() string {
	switch h {
	case envHonoured:
		return "honoured"
	case envRefused:
		return "refused"
	}
	return "ignored"
}

// envoyEnvVar is one of envoy's variables: how floodgate handles it, and a
// note saying to what it maps or why it is ignored.
type envoyEnvVar struct {
	Name     string
	Handling envHandling
	Note     string
}

// envoyEnvVars is every variable of envoy's settings.go, in its order.
var envoyEnvVars = []envoyEnvVar{
	{"HOST", envHonoured, "--http-addr HOST:PORT"},
	{"PORT", envHonoured, "--http-addr HOST:PORT"},
	{"DEBUG_HOST", envIgnored, "floodgate's --debug-addr serves pprof only, on loopback unless a token is set"},
	{"DEBUG_PORT", envIgnored, "see DEBUG_HOST"},
	{"GRPC_UDS", envHonoured, "--grpc-addr unix:PATH (before GRPC_HOST/GRPC_PORT)"},
	{"GRPC_HOST", envHonoured, "--grpc-addr GRPC_HOST:GRPC_PORT"},
	{"GRPC_PORT", envHonoured, "--grpc-addr GRPC_HOST:GRPC_PORT"},
	{"GRPC_MAX_CONNECTION_AGE", envIgnored, "floodgate closes idle connections instead (--grpc-max-idle)"},
	{"GRPC_MAX_CONNECTION_AGE_GRACE", envIgnored, "see GRPC_MAX_CONNECTION_AGE"},
	{"GRPC_SERVER_USE_TLS", envHonoured, "true: --tls-grpc-only with GRPC_SERVER_TLS_CERT and _KEY (TLS on gRPC only, as envoy; --tls-cert and --tls-key give TLS on both APIs)"},
	{"GRPC_SERVER_TLS_CERT", envHonoured, "--tls-cert (with GRPC_SERVER_USE_TLS; reloaded when it changes)"},
	{"GRPC_SERVER_TLS_KEY", envHonoured, "--tls-key (with GRPC_SERVER_USE_TLS)"},
	{"GRPC_CLIENT_TLS_CACERT", envHonoured, "--tls-client-ca (with GRPC_SERVER_USE_TLS: gRPC clients need certificates; with --tls-cert: both APIs)"},
	{"GRPC_CLIENT_TLS_SAN", envHonoured, "--tls-client-san"},
	{"LOG_LEVEL", envHonoured, "--log-level (trace → debug; fatal, panic → error)"},
	{"LOG_FORMAT", envHonoured, "--log-format (text, json)"},
	{"CONFIG_TYPE", envHonoured, "FILE → --config (RUNTIME_ROOT); GRPC_XDS_SOTW → --config-xds CONFIG_GRPC_XDS_SERVER_URL; anything else is refused"},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", envHonoured, "false (envoy's default): with GRPC_XDS_SOTW, the APIs serve once the first push has come (--config-xds-wait); from files, envoy compatibility always starts, with or without a valid configuration"},
	{"CONFIG_GRPC_XDS_NODE_ID", envHonoured, "--config-xds-node-id (default \"default\", as envoy)"},
	{"CONFIG_GRPC_XDS_NODE_METADATA", envHonoured, "--config-xds-node-metadata (k1=v1,k2=v2)"},
	{"CONFIG_GRPC_XDS_SERVER_URL", envHonoured, "--config-xds (default localhost:18000, as envoy)"},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", envHonoured, "--config-xds-retry: the first delay before reconnecting, doubled up to a minute"},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", envHonoured, "--config-xds-headers (name:value,name:value): gRPC headers on the xDS stream"},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", envHonoured, "--config-xds-tls"},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", envHonoured, "--config-xds-cert (with CONFIG_GRPC_XDS_SERVER_USE_TLS)"},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", envHonoured, "--config-xds-key (with CONFIG_GRPC_XDS_SERVER_USE_TLS)"},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", envHonoured, "--config-xds-ca (with CONFIG_GRPC_XDS_SERVER_USE_TLS)"},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", envHonoured, "--config-xds-server-name (with CONFIG_GRPC_XDS_SERVER_USE_TLS)"},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", envIgnored, "the back-off starts at CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL and doubles up to a minute, ±25%"},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", envIgnored, "see XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", envIgnored, "see XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"},
	{"XDS_CLIENT_BACKOFF_JITTER", envIgnored, "see XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", envIgnored, "grpc-go's 4 MiB limit on a push"},
	{"USE_DOG_STATSD", envHonoured, "envoy's stats as DogStatsD over UDP, EXTRA_TAGS as tags (needs USE_STATSD=false, as envoy)"},
	{"USE_DOG_STATSD_MOGRIFIERS", envIgnored, "DogStatsD mogrifiers are not supported: names are sent as envoy names them"},
	{"USE_STATSD", envHonoured, "envoy's stats over StatsD (true by default, as envoy; TCP, or UDP with gostats' STATSD_PROTOCOL=udp); Prometheus metrics stay at /metrics"},
	{"STATSD_HOST", envHonoured, "the StatsD host"},
	{"STATSD_PORT", envHonoured, "the StatsD port"},
	{"EXTRA_TAGS", envHonoured, "k1:v1,k2:v2: tags on every stat (in the name for StatsD, as gostats writes them)"},
	{"STATS_FLUSH_INTERVAL", envHonoured, "how often counter deltas are sent"},
	{"DISABLE_STATS", envHonoured, "no StatsD; Prometheus metrics are still served at /metrics"},
	{"USE_PROMETHEUS", envIgnored, "Prometheus metrics are always served at /metrics on the HTTP address, under floodgate's names"},
	{"PROMETHEUS_ADDR", envIgnored, "see USE_PROMETHEUS"},
	{"PROMETHEUS_PATH", envIgnored, "see USE_PROMETHEUS"},
	{"PROMETHEUS_MAPPER_YAML", envIgnored, "see USE_PROMETHEUS"},
	{"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", envIgnored, "see USE_PROMETHEUS"},
	{"RUNTIME_ROOT", envHonoured, "--config RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (its *.yaml files)"},
	{"RUNTIME_SUBDIRECTORY", envHonoured, "see RUNTIME_ROOT"},
	{"RUNTIME_APPDIRECTORY", envHonoured, "see RUNTIME_ROOT (default config)"},
	{"RUNTIME_IGNOREDOTFILES", envIgnored, "floodgate always ignores dot files"},
	{"RUNTIME_WATCH_ROOT", envHonoured, "either way the directory is checked for changes every --reload-interval (symbolic-link swaps of the root included)"},
	{"EXPIRATION_JITTER_MAX_SECONDS", envIgnored, "floodgate's keys expire with their state"},
	{"LOCAL_CACHE_SIZE_IN_BYTES", envHonoured, "--local-cache-bytes (0, envoy's default, for none)"},
	{"NEAR_LIMIT_RATIO", envHonoured, "the near-limit ratio of metrics"},
	{"CACHE_KEY_PREFIX", envHonoured, "--redis-prefix (floodgate's keys are named differently from envoy's: counts are not shared with a running envoyproxy/ratelimit)"},
	{"BACKEND_TYPE", envRefused, "redis is honoured; memcache is refused"},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", envHonoured, "an over-limit descriptor stops the others being counted"},
	{"LIMIT_RESPONSE_HEADERS_ENABLED", envHonoured, "response_headers_to_add"},
	{"LIMIT_LIMIT_HEADER", envHonoured, "the limit header's name"},
	{"LIMIT_REMAINING_HEADER", envHonoured, "the remaining header's name"},
	{"LIMIT_RESET_HEADER", envHonoured, "the reset header's name"},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", envHonoured, "health fails until a configuration with a domain is loaded"},
	{"REDIS_SOCKET_TYPE", envHonoured, "tcp or unix: the form of --redis"},
	{"REDIS_TYPE", envHonoured, "SINGLE → redis://, SENTINEL → redis+sentinel://, CLUSTER → redis+cluster://"},
	{"REDIS_URL", envHonoured, "--redis"},
	{"REDIS_POOL_SIZE", envIgnored, "floodgate's client pipelines on few connections"},
	{"REDIS_AUTH", envHonoured, "the Redis password ([user:]password), never logged"},
	{"REDIS_TLS", envHonoured, "rediss:// (system roots); the REDIS_TLS_* files apply to --redis with it"},
	{"REDIS_TLS_CLIENT_CERT", envHonoured, "--redis-tls-cert"},
	{"REDIS_TLS_CLIENT_KEY", envHonoured, "--redis-tls-key"},
	{"REDIS_TLS_CACERT", envHonoured, "--redis-tls-ca (besides the system roots)"},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", envHonoured, "--redis-tls-insecure-skip-verify (the chain is still verified)"},
	{"REDIS_PIPELINE_WINDOW", envHonoured, "?max_flush_delay= on --redis: each write to Redis waits up to the window to gather more commands (at most 1ms; 0 or unset: none)"},
	{"REDIS_PIPELINE_LIMIT", envIgnored, "floodgate's client pipelines by itself"},
	{"REDIS_CLUSTER_PIPELINE_PARALLELISM", envIgnored, "floodgate's client pipelines by itself"},
	{"REDIS_PERSECOND", envHonoured, "true: the limits whose period is one second go to a Redis of their own, --redis-persecond (REDIS_PERSECOND_*); a request with limits on both is decided per store"},
	{"REDIS_PERSECOND_SOCKET_TYPE", envHonoured, "tcp or unix: the form of --redis-persecond"},
	{"REDIS_PERSECOND_TYPE", envHonoured, "SINGLE → redis://, SENTINEL → redis+sentinel://, CLUSTER → redis+cluster:// (--redis-persecond)"},
	{"REDIS_PERSECOND_URL", envHonoured, "--redis-persecond (default /var/run/nutcracker/ratelimitpersecond.sock, as envoy)"},
	{"REDIS_PERSECOND_POOL_SIZE", envIgnored, "floodgate's client pipelines on few connections"},
	{"REDIS_PERSECOND_AUTH", envHonoured, "the per-second Redis password ([user:]password), never logged"},
	{"REDIS_PERSECOND_TLS", envHonoured, "rediss:// for --redis-persecond; REDIS_TLS_CACERT, REDIS_TLS_CLIENT_CERT/KEY and REDIS_TLS_SKIP_HOSTNAME_VERIFICATION apply to it too (--redis-persecond-tls-*), as envoy shares them"},
	{"REDIS_SENTINEL_AUTH", envHonoured, "the Sentinels' credentials, [user:]password: an ACL user before the first ':' (?sentinel_username= on the URL), the password after it, never logged"},
	{"REDIS_PERSECOND_SENTINEL_AUTH", envHonoured, "the per-second Sentinels' credentials, [user:]password, as REDIS_SENTINEL_AUTH, never logged"},
	{"REDIS_PERSECOND_PIPELINE_WINDOW", envHonoured, "?max_flush_delay= on --redis-persecond, as REDIS_PIPELINE_WINDOW"},
	{"REDIS_PERSECOND_PIPELINE_LIMIT", envIgnored, "floodgate's client pipelines by itself"},
	{"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", envIgnored, "floodgate's client pipelines by itself"},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", envHonoured, "true: the health checks (/healthcheck, gRPC \"ratelimit\") fail while Redis does not answer a probe (every second) and pass again once it does"},
	{"REDIS_TIMEOUT", envHonoured, "--timeout (per store call; 10s when unset, as envoy)"},
	{"REDIS_PERSECOND_TIMEOUT", envHonoured, "--redis-persecond-timeout (per store call; --timeout's when unset)"},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR", envIgnored, "floodgate's client pipelines by itself"},
	{"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", envIgnored, "floodgate's client pipelines by itself"},
	{"REDIS_STARTUP_INITIAL_INTERVAL", envHonoured, "as envoy, the start waits for each Redis that does not answer (the APIs not listening yet): tried again after this (1s), then after up to twice as long each time (jittered), up to REDIS_STARTUP_MAX_INTERVAL"},
	{"REDIS_STARTUP_MAX_INTERVAL", envHonoured, "the longest wait between tries (30s)"},
	{"REDIS_STARTUP_MAX_ELAPSED_TIME", envHonoured, "how long to keep trying before exiting with the error (0, the default: for ever)"},
	{"MEMCACHE_HOST_PORT", envIgnored, "memcached is not supported (BACKEND_TYPE=memcache is refused)"},
	{"MEMCACHE_MAX_IDLE_CONNS", envIgnored, "see MEMCACHE_HOST_PORT"},
	{"MEMCACHE_SRV", envIgnored, "see MEMCACHE_HOST_PORT"},
	{"MEMCACHE_SRV_REFRESH", envIgnored, "see MEMCACHE_HOST_PORT"},
	{"MEMCACHE_TLS", envIgnored, "see MEMCACHE_HOST_PORT"},
	{"MEMCACHE_TLS_CLIENT_CERT", envIgnored, "see MEMCACHE_HOST_PORT"},
	{"MEMCACHE_TLS_CLIENT_KEY", envIgnored, "see MEMCACHE_HOST_PORT"},
	{"MEMCACHE_TLS_CACERT", envIgnored, "see MEMCACHE_HOST_PORT"},
	{"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", envIgnored, "see MEMCACHE_HOST_PORT"},
	{"SHADOW_MODE", envHonoured, "global shadow mode: OVER_LIMIT answered OK"},
	{"QUOTA_MODE", envHonoured, "global quota mode"},
	{"RESPONSE_DYNAMIC_METADATA", envHonoured, "dynamic_metadata on the response: domain, descriptors, hitsAddend, the passed limits' metadata"},
	{"MERGE_DOMAIN_CONFIG", envHonoured, "files of one domain merge (their top-level descriptors join; one in two files is an error)"},
	{"TRACING_ENABLED", envHonoured, "--tracing (OTLP; the endpoint from OTEL_EXPORTER_OTLP_*, as envoy)"},
	{"TRACING_SERVICE_NAME", envHonoured, "--tracing-service-name (RateLimit by default, as envoy)"},
	{"TRACING_SERVICE_NAMESPACE", envHonoured, "--tracing-service-namespace"},
	{"TRACING_SERVICE_INSTANCE_ID", envHonoured, "--tracing-service-instance-id (a random UUID by default)"},
	{"TRACING_EXPORTER_PROTOCOL", envHonoured, "--tracing-protocol (http or grpc)"},
	{"TRACING_SAMPLING_RATE", envHonoured, "--tracing-sampling-rate (0 to 1; beyond, clamped)"},
}

// Envoy's defaults that floodgate applies in envoy compatibility mode.
const (
	envoyRuntimeRoot   = "/srv/runtime_data/current"
	envoyAppDirectory  = "config"
	envoyRedisURL      = "/var/run/nutcracker/ratelimit.sock"
	envoyPerSecondURL  = "/var/run/nutcracker/ratelimitpersecond.sock"
	envoySocketType    = "unix"
	envoyRedisType     = "SINGLE"
	envoyDefaultHost   = "0.0.0.0"
	envoyDefaultPort   = "8080"
	envoyDefaultGRPC   = "8081"
	envoyLimitHeader   = "RateLimit-Limit"
	envoyRemainHeader  = "RateLimit-Remaining"
	envoyResetHeader   = "RateLimit-Reset"
	envoyNearLimitDflt = 0.8
	envoyRedisTimeout  = 10 * time.Second // REDIS_TIMEOUT's default
)

// envoySettings is what envoy's variables say, for runServe.
type envoySettings struct {
	// flags are values for floodgate's flags (by name), applied to those
	// not given on the command line.
	flags            map[string]string
	envoy            server.EnvoyOptions
	nearLimitRatio   float64
	redisPassword    string // REDIS_AUTH's password; never logged
	sentinelPassword string // REDIS_SENTINEL_AUTH
	// REDIS_PERSECOND_AUTH's and REDIS_PERSECOND_SENTINEL_AUTH's passwords.
	psPassword, psSentinelPassword string
	stats                          *envoystats.Options // StatsD for envoy's stats; nil for none
	startup                        envoyStartup        // REDIS_STARTUP_*
	notices                        []string
}

// readEnvoyEnv reads envoy's variables through lookup (os.LookupEnv). The
// error names the variable at fault.
func readEnvoyEnv(lookup func(string) (string, bool)) (*envoySettings, error) {
	es := &envoySettings{flags: map[string]string{}, nearLimitRatio: envoyNearLimitDflt}
	get := func(name, def string) string {
		if v, ok := lookup(name); ok {
			return v
		}
		return def
	}
	var firstErr error
	bad := func(name, format string, args ...any) {
		if firstErr == nil {
			firstErr = fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...))
		}
	}
	boolean := func(name string, def bool) bool {
		v, ok := lookup(name)
		if !ok || v == "" {
			return def
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			bad(name, "%q is not a boolean", v)
		}
		return b
	}

	// Refusals.
	if v := get("BACKEND_TYPE", "redis"); !strings.EqualFold(v, "redis") && v != "" {
		bad("BACKEND_TYPE", "%q is not supported: floodgate keeps limits in Redis (memcached is not supported)", v)
	}
	configType := strings.ToUpper(get("CONFIG_TYPE", "FILE"))
	if configType != "FILE" && configType != "GRPC_XDS_SOTW" && configType != "" {
		bad("CONFIG_TYPE", "%q is not supported: FILE (RUNTIME_ROOT) or GRPC_XDS_SOTW (an xDS management server)", configType)
	}
	if boolean("GRPC_SERVER_USE_TLS", false) {
		// envoyproxy/ratelimit serves TLS on gRPC only; HTTP stays plaintext.
		cert, key := get("GRPC_SERVER_TLS_CERT", ""), get("GRPC_SERVER_TLS_KEY", "")
		switch {
		case cert == "":
			bad("GRPC_SERVER_TLS_CERT", "is empty: GRPC_SERVER_USE_TLS=true needs a certificate file")
		case key == "":
			bad("GRPC_SERVER_TLS_KEY", "is empty: GRPC_SERVER_USE_TLS=true needs a key file")
		}
		es.flags["tls-cert"], es.flags["tls-key"], es.flags["tls-grpc-only"] = cert, key, "true"
	}

	// Listeners.
	_, hostSet := lookup("HOST")
	_, portSet := lookup("PORT")
	if hostSet || portSet {
		es.flags["http-addr"] = hostPort("PORT", get("HOST", envoyDefaultHost), get("PORT", envoyDefaultPort), bad)
	}
	if uds := get("GRPC_UDS", ""); uds != "" {
		es.flags["grpc-addr"] = "unix:" + uds
	} else {
		_, ghSet := lookup("GRPC_HOST")
		_, gpSet := lookup("GRPC_PORT")
		if ghSet || gpSet {
			es.flags["grpc-addr"] = hostPort("GRPC_PORT", get("GRPC_HOST", envoyDefaultHost), get("GRPC_PORT", envoyDefaultGRPC), bad)
		}
	}

	// Logging.
	if v, ok := lookup("LOG_LEVEL"); ok && v != "" {
		switch strings.ToLower(v) {
		case "trace", "debug":
			es.flags["log-level"] = "debug"
		case "info":
			es.flags["log-level"] = "info"
		case "warn", "warning":
			es.flags["log-level"] = "warn"
		case "error", "fatal", "panic":
			es.flags["log-level"] = "error"
		default:
			bad("LOG_LEVEL", "%q is not a log level (trace, debug, info, warn, error, fatal, panic)", v)
		}
	}
	if v, ok := lookup("LOG_FORMAT"); ok && v != "" {
		switch strings.ToLower(v) {
		case "text", "json":
			es.flags["log-format"] = strings.ToLower(v)
		default:
			bad("LOG_FORMAT", "%q is not text or json", v)
		}
	}

	// Configuration: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY,
	// or an xDS management server.
	if configType == "GRPC_XDS_SOTW" {
		envoyXDSEnv(es, get, boolean, bad)
	} else {
		es.flags["config"] = filepath.Join(get("RUNTIME_ROOT", envoyRuntimeRoot), get("RUNTIME_SUBDIRECTORY", ""), get("RUNTIME_APPDIRECTORY", envoyAppDirectory))
	}
	boolean("RUNTIME_WATCH_ROOT", true)
	boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false)

	// Redis.
	redisTLS := boolean("REDIS_TLS", false)
	url, err := envoyRedisURLOf(get("REDIS_URL", envoyRedisURL), get("REDIS_SOCKET_TYPE", envoySocketType), get("REDIS_TYPE", envoyRedisType), redisTLS)
	if err != nil {
		bad(err.name, "%s", err.msg)
	}
	url, es.redisPassword = envoyAuth(url, get("REDIS_AUTH", ""))
	// envoyproxy/ratelimit splits REDIS_SENTINEL_AUTH at its first ':' into
	// an ACL user and a password, as REDIS_AUTH (src/redis/driver_impl.go
	// createDialer): the user goes into the URL, the password apart.
	url, es.sentinelPassword = envoySentinelAuth(url, get("REDIS_SENTINEL_AUTH", ""))
	url = envoyPipelineWindow(url, "REDIS_PIPELINE_WINDOW", get, bad)
	es.flags["redis"] = url
	for name, flag := range map[string]string{
		"GRPC_CLIENT_TLS_CACERT": "tls-client-ca",
		"GRPC_CLIENT_TLS_SAN":    "tls-client-san",
	} {
		if v := get(name, ""); v != "" {
			es.flags[flag] = v
		}
	}
	// envoy builds one TLS configuration from the REDIS_TLS_* files, used
	// by each Redis that speaks TLS.
	if redisTLS || strings.HasPrefix(url, "rediss") {
		envoyRedisTLSFiles(es.flags, "redis", get, boolean)
	}
	envoyPerSecondEnv(es, lookup, get, boolean, bad)
	es.startup = envoyStartup{Initial: time.Second, Max: 30 * time.Second}
	for name, d := range map[string]*time.Duration{"REDIS_STARTUP_INITIAL_INTERVAL": &es.startup.Initial,
		"REDIS_STARTUP_MAX_INTERVAL": &es.startup.Max, "REDIS_STARTUP_MAX_ELAPSED_TIME": &es.startup.Elapsed} {
		if v, ok := lookup(name); ok && v != "" {
			p, err := time.ParseDuration(v)
			switch {
			case err != nil || p < 0:
				bad(name, "%q is not a duration (1s, 500ms)", v)
			case p == 0 && d != &es.startup.Elapsed:
				bad(name, "%q: want more than 0", v)
			default:
				*d = p
			}
		}
	}
	// envoyproxy/ratelimit waits up to REDIS_TIMEOUT, 10 s by default, for
	// Redis; floodgate's own 50 ms would fail calls envoy answers.
	es.flags["timeout"] = envoyRedisTimeout.String()
	if v, ok := lookup("REDIS_TIMEOUT"); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			bad("REDIS_TIMEOUT", "%q is not a positive duration (10s, 50ms)", v)
		} else {
			es.flags["timeout"] = d.String()
		}
	}
	if v := get("CACHE_KEY_PREFIX", ""); v != "" {
		es.flags["redis-prefix"] = v
	}
	if v, ok := lookup("LOCAL_CACHE_SIZE_IN_BYTES"); ok && v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 0 {
			bad("LOCAL_CACHE_SIZE_IN_BYTES", "%q is not a size in bytes", v)
		} else {
			es.flags["local-cache-bytes"] = v
		}
	}
	if v, ok := lookup("NEAR_LIMIT_RATIO"); ok && v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f > 1 {
			bad("NEAR_LIMIT_RATIO", "%q is not a ratio in (0, 1]", v)
		} else {
			es.nearLimitRatio = f
		}
	}

	// Behaviour.
	es.envoy = server.EnvoyOptions{
		Enabled:                     true,
		StopIncrementWhenOverLimit:  boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false),
		ShadowMode:                  boolean("SHADOW_MODE", false),
		QuotaMode:                   boolean("QUOTA_MODE", false),
		ResponseHeaders:             boolean("LIMIT_RESPONSE_HEADERS_ENABLED", false),
		LimitHeader:                 get("LIMIT_LIMIT_HEADER", envoyLimitHeader),
		RemainingHeader:             get("LIMIT_REMAINING_HEADER", envoyRemainHeader),
		ResetHeader:                 get("LIMIT_RESET_HEADER", envoyResetHeader),
		HealthyWithAtLeastOneConfig: boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false),
		DynamicMetadata:             boolean("RESPONSE_DYNAMIC_METADATA", false),
		MergeDomainConfig:           boolean("MERGE_DOMAIN_CONFIG", false),
		HealthFollowsStore:          boolean("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false),
	}
	es.stats = readEnvoyStats(lookup, boolean, bad)
	readEnvoyTracing(es.flags, get, boolean, bad)
	if firstErr != nil {
		return nil, firstErr
	}

	// Notices: every ignored variable that is set, once.
	for _, v := range envoyEnvVars {
		if v.Handling != envIgnored {
			continue
		}
		if _, ok := lookup(v.Name); ok {
			es.notices = append(es.notices, v.Name+": accepted and ignored: "+v.Note)
		}
	}
	sort.Strings(es.notices)
	return es, nil
}

// hostPort joins an envoy HOST and PORT pair; a bad port is reported on
// portVar.
func hostPort(portVar, host, port string, bad func(string, string, ...any)) string {
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		bad(portVar, "%q is not a port", port)
	}
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		host = "[" + host + "]" // IPv6
	}
	return host + ":" + port
}

type envError struct{ name, msg string }

// envoyRedisURLOf maps envoy's REDIS_URL, REDIS_SOCKET_TYPE, REDIS_TYPE and
// REDIS_TLS to floodgate's --redis URL.
func envoyRedisURLOf(url, socketType, redisType string, useTLS bool) (string, *envError) {
	if url == "" {
		return "", &envError{"REDIS_URL", "is empty"}
	}
	scheme := "redis"
	if useTLS {
		scheme = "rediss"
	}
	switch strings.ToLower(redisType) {
	case "single", "":
		switch strings.ToLower(socketType) {
		case "unix":
			if useTLS {
				return "", &envError{"REDIS_TLS", "TLS over a Unix socket is not supported"}
			}
			return "unix://" + url, nil
		case "tcp", "":
			if strings.Contains(url, "://") {
				return url, nil
			}
			return scheme + "://" + url, nil
		}
		return "", &envError{"REDIS_SOCKET_TYPE", fmt.Sprintf("%q is not tcp or unix", socketType)}
	case "sentinel":
		parts := strings.Split(url, ",")
		if len(parts) < 2 || parts[0] == "" {
			return "", &envError{"REDIS_URL", "a Sentinel REDIS_URL is <master name>,<sentinel1>,...,<sentinelN>"}
		}
		return scheme + "+sentinel://" + strings.Join(parts[1:], ",") + "/" + parts[0], nil
	case "cluster":
		return scheme + "+cluster://" + url, nil
	}
	return "", &envError{"REDIS_TYPE", fmt.Sprintf("%q is not SINGLE, SENTINEL or CLUSTER", redisType)}
}

// envoyAuth applies an envoy REDIS_AUTH value, [user:]password, to url:
// the user goes into the URL, the password is returned apart.
func envoyAuth(url, auth string) (string, string) {
	if auth == "" {
		return url, ""
	}
	user, pass, hasUser := strings.Cut(auth, ":")
	if !hasUser {
		user, pass = "", auth
	}
	if user != "" {
		url = withUser(url, user)
	}
	return url, pass
}

// envoySentinelAuth reads an envoy REDIS_SENTINEL_AUTH value,
// [user:]password, for a Sentinel URL: a user goes into the URL as
// ?sentinel_username=, the password is returned apart. Other URLs are
// returned as they are (envoy uses the value only with REDIS_TYPE=sentinel).
func envoySentinelAuth(url, auth string) (string, string) {
	user, pass, hasUser := strings.Cut(auth, ":")
	if !hasUser {
		user, pass = "", auth
	}
	if user != "" && strings.Contains(strings.SplitN(url, "://", 2)[0], "+sentinel") {
		url = withQuery(url, "sentinel_username="+neturl.QueryEscape(user))
	}
	return url, pass
}

// envoyPipelineWindow maps envoy's REDIS_PIPELINE_WINDOW (or its per-second
// twin, name) onto url as ?max_flush_delay=: envoy's implicit pipeline
// flushes once per window, rueidis's write loop waits up to its flush delay
// to gather commands. Unset or 0: url as it is.
func envoyPipelineWindow(url, name string, get func(string, string) string, bad func(string, string, ...any)) string {
	v := get(name, "")
	if v == "" {
		return url
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil || d < 0:
		bad(name, "%q is not a duration (150us, 500us)", v)
		return url
	case d == 0:
		return url
	case d > time.Millisecond:
		bad(name, "%q: floodgate waits at most 1ms to gather commands (envoy advises 150us to 500us)", v)
		return url
	}
	return withQuery(url, "max_flush_delay="+strconv.FormatInt(d.Microseconds(), 10)+"us")
}

// withQuery returns url with the query parameter kv added.
func withQuery(url, kv string) string {
	if strings.Contains(url, "?") {
		return url + "&" + kv
	}
	return url + "?" + kv
}

// envoyRedisTLSFiles maps envoy's REDIS_TLS_* files to the TLS flags of the
// store whose URL flag is store (redis, redis-persecond).
func envoyRedisTLSFiles(flags map[string]string, store string, get func(string, string) string, boolean func(string, bool) bool) {
	for name, suffix := range map[string]string{
		"REDIS_TLS_CACERT":      "-tls-ca",
		"REDIS_TLS_CLIENT_CERT": "-tls-cert",
		"REDIS_TLS_CLIENT_KEY":  "-tls-key",
	} {
		if v := get(name, ""); v != "" {
			flags[store+suffix] = v
		}
	}
	if boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false) {
		flags[store+"-tls-insecure-skip-verify"] = "true"
	}
}

// envoyPerSecondEnv maps envoy's REDIS_PERSECOND_* variables to the
// --redis-persecond flags. Without REDIS_PERSECOND=true envoy reads none of
// them, and neither does floodgate: those that are set get a notice.
func envoyPerSecondEnv(es *envoySettings, lookup func(string) (string, bool), get func(string, string) string, boolean func(string, bool) bool, bad func(string, string, ...any)) {
	if !boolean("REDIS_PERSECOND", false) {
		for _, v := range envoyEnvVars {
			if _, ok := lookup(v.Name); ok && v.Handling == envHonoured && strings.HasPrefix(v.Name, "REDIS_PERSECOND_") {
				es.notices = append(es.notices, v.Name+": ignored: REDIS_PERSECOND is not true (as envoy)")
			}
		}
		return
	}
	psTLS := boolean("REDIS_PERSECOND_TLS", false)
	url, err := envoyRedisURLOf(get("REDIS_PERSECOND_URL", envoyPerSecondURL), get("REDIS_PERSECOND_SOCKET_TYPE", envoySocketType), get("REDIS_PERSECOND_TYPE", envoyRedisType), psTLS)
	if err != nil {
		// envoyRedisURLOf names REDIS_URL, REDIS_TLS, ...: these are their
		// per-second twins.
		bad("REDIS_PERSECOND_"+strings.TrimPrefix(err.name, "REDIS_"), "%s", strings.ReplaceAll(err.msg, "REDIS_URL", "REDIS_PERSECOND_URL"))
		return
	}
	url, es.psPassword = envoyAuth(url, get("REDIS_PERSECOND_AUTH", ""))
	url, es.psSentinelPassword = envoySentinelAuth(url, get("REDIS_PERSECOND_SENTINEL_AUTH", ""))
	url = envoyPipelineWindow(url, "REDIS_PERSECOND_PIPELINE_WINDOW", get, bad)
	es.flags["redis-persecond"] = url
	if psTLS || strings.HasPrefix(url, "rediss") {
		envoyRedisTLSFiles(es.flags, "redis-persecond", get, boolean)
	}
	if v, ok := lookup("REDIS_PERSECOND_TIMEOUT"); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			bad("REDIS_PERSECOND_TIMEOUT", "%q is not a positive duration (10s, 50ms)", v)
		} else {
			es.flags["redis-persecond-timeout"] = d.String()
		}
	}
}

// withUser puts user in url's user information.
func withUser(url, user string) string {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok || strings.HasPrefix(scheme, "unix") {
		return url
	}
	return scheme + "://" + user + "@" + rest
}

// readEnvoyTracing maps envoy's TRACING_* variables to serve's tracing
// flags; they apply only with TRACING_ENABLED=true.
func readEnvoyTracing(flags map[string]string, get func(string, string) string, boolean func(string, bool) bool, bad func(string, string, ...any)) {
	if !boolean("TRACING_ENABLED", false) {
		return
	}
	flags["tracing"] = "true"
	flags["tracing-service-name"] = get("TRACING_SERVICE_NAME", "RateLimit")
	if v := get("TRACING_SERVICE_NAMESPACE", ""); v != "" {
		flags["tracing-service-namespace"] = v
	}
	if v := get("TRACING_SERVICE_INSTANCE_ID", ""); v != "" {
		flags["tracing-service-instance-id"] = v
	}
	switch v := strings.ToLower(get("TRACING_EXPORTER_PROTOCOL", "http")); v {
	case "http", "grpc":
		flags["tracing-protocol"] = v
	case "":
		flags["tracing-protocol"] = "http"
	default:
		bad("TRACING_EXPORTER_PROTOCOL", "%q is not http or grpc", v)
	}
	if v := get("TRACING_SAMPLING_RATE", ""); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			bad("TRACING_SAMPLING_RATE", "%q is not a number", v)
			return
		}
		// envoy samples always at 1 or more, never at 0 or less.
		flags["tracing-sampling-rate"] = strconv.FormatFloat(min(max(f, 0), 1), 'g', -1, 64)
	}
}

// envoyStartup is how envoyproxy/ratelimit waits at start for a Redis that
// does not answer (f2fb157, src/redis/driver_impl.go, jpillora/backoff with
// factor 2 and jitter): the first wait Initial, then up to twice the last,
// at most Max, for at most Elapsed in all (0: for ever).
type envoyStartup struct{ Initial, Max, Elapsed time.Duration }

// wait returns the wait after failed try n (n >= 1), as jpillora/backoff's
// ForAttempt(n-1): Initial·2^(n-1), jittered to a point between Initial and
// that (r in [0, 1)), then capped at Max.
func (e envoyStartup) wait(n int, r float64) time.Duration {
	if e.Initial >= e.Max {
		return e.Max
	}
	d := float64(e.Initial) * math.Pow(2, float64(n-1))
	d = float64(e.Initial) + r*(d-float64(e.Initial))
	if d >= float64(e.Max) {
		return e.Max
	}
	return time.Duration(d)
}
