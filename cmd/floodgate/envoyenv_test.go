package main

import (
	"strings"
	"testing"
	"time"
)

// envoySettingsNames are the variables of envoyproxy/ratelimit's
// src/settings/settings.go at commit f2fb157, in its order.
var envoySettingsNames = strings.Fields(`HOST PORT DEBUG_HOST DEBUG_PORT GRPC_UDS GRPC_HOST GRPC_PORT
GRPC_MAX_CONNECTION_AGE GRPC_MAX_CONNECTION_AGE_GRACE GRPC_SERVER_USE_TLS GRPC_SERVER_TLS_CERT
GRPC_SERVER_TLS_KEY GRPC_CLIENT_TLS_CACERT GRPC_CLIENT_TLS_SAN LOG_LEVEL LOG_FORMAT CONFIG_TYPE
FORCE_START_WITHOUT_INITIAL_CONFIG CONFIG_GRPC_XDS_NODE_ID CONFIG_GRPC_XDS_NODE_METADATA
CONFIG_GRPC_XDS_SERVER_URL CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL
CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS CONFIG_GRPC_XDS_SERVER_USE_TLS CONFIG_GRPC_XDS_CLIENT_TLS_CERT
CONFIG_GRPC_XDS_CLIENT_TLS_KEY CONFIG_GRPC_XDS_SERVER_TLS_CACERT CONFIG_GRPC_XDS_SERVER_TLS_SAN
XDS_CLIENT_BACKOFF_INITIAL_INTERVAL XDS_CLIENT_BACKOFF_MAX_INTERVAL XDS_CLIENT_BACKOFF_RANDOM_FACTOR
XDS_CLIENT_BACKOFF_JITTER XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES USE_DOG_STATSD USE_DOG_STATSD_MOGRIFIERS
USE_STATSD STATSD_HOST STATSD_PORT EXTRA_TAGS STATS_FLUSH_INTERVAL DISABLE_STATS USE_PROMETHEUS
PROMETHEUS_ADDR PROMETHEUS_PATH PROMETHEUS_MAPPER_YAML PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS
RUNTIME_ROOT RUNTIME_SUBDIRECTORY RUNTIME_APPDIRECTORY RUNTIME_IGNOREDOTFILES RUNTIME_WATCH_ROOT
EXPIRATION_JITTER_MAX_SECONDS LOCAL_CACHE_SIZE_IN_BYTES NEAR_LIMIT_RATIO CACHE_KEY_PREFIX BACKEND_TYPE
STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT LIMIT_RESPONSE_HEADERS_ENABLED LIMIT_LIMIT_HEADER
LIMIT_REMAINING_HEADER LIMIT_RESET_HEADER HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED REDIS_SOCKET_TYPE
REDIS_TYPE REDIS_URL REDIS_POOL_SIZE REDIS_AUTH REDIS_TLS REDIS_TLS_CLIENT_CERT REDIS_TLS_CLIENT_KEY
REDIS_TLS_CACERT REDIS_TLS_SKIP_HOSTNAME_VERIFICATION REDIS_PIPELINE_WINDOW REDIS_PIPELINE_LIMIT
REDIS_CLUSTER_PIPELINE_PARALLELISM REDIS_PERSECOND REDIS_PERSECOND_SOCKET_TYPE REDIS_PERSECOND_TYPE
REDIS_PERSECOND_URL REDIS_PERSECOND_POOL_SIZE REDIS_PERSECOND_AUTH REDIS_PERSECOND_TLS
REDIS_SENTINEL_AUTH REDIS_PERSECOND_SENTINEL_AUTH REDIS_PERSECOND_PIPELINE_WINDOW
REDIS_PERSECOND_PIPELINE_LIMIT REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM
REDIS_HEALTH_CHECK_ACTIVE_CONNECTION REDIS_TIMEOUT REDIS_PERSECOND_TIMEOUT REDIS_POOL_ON_EMPTY_BEHAVIOR
REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR REDIS_STARTUP_INITIAL_INTERVAL REDIS_STARTUP_MAX_INTERVAL
REDIS_STARTUP_MAX_ELAPSED_TIME MEMCACHE_HOST_PORT MEMCACHE_MAX_IDLE_CONNS MEMCACHE_SRV
MEMCACHE_SRV_REFRESH MEMCACHE_TLS MEMCACHE_TLS_CLIENT_CERT MEMCACHE_TLS_CLIENT_KEY MEMCACHE_TLS_CACERT
MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION SHADOW_MODE QUOTA_MODE RESPONSE_DYNAMIC_METADATA
MERGE_DOMAIN_CONFIG TRACING_ENABLED TRACING_SERVICE_NAME TRACING_SERVICE_NAMESPACE
TRACING_SERVICE_INSTANCE_ID TRACING_EXPORTER_PROTOCOL TRACING_SAMPLING_RATE`)

func TestEnvoyEnvTableIsComplete(t *testing.T) {
	table := map[string]bool{}
	for _, v := range envoyEnvVars {
		if table[v.Name] {
			t.Errorf("%s is in the table twice", v.Name)
		}
		table[v.Name] = true
		if v.Note == "" {
			t.Errorf("%s has no note", v.Name)
		}
	}
	for _, n := range envoySettingsNames {
		if !table[n] {
			t.Errorf("envoy's %s is not in the table", n)
		}
		delete(table, n)
	}
	for n := range table {
		t.Errorf("%s is in the table but not in envoy's settings", n)
	}
	if len(envoyEnvVars) != len(envoySettingsNames) {
		t.Errorf("%d variables in the table, envoy has %d", len(envoyEnvVars), len(envoySettingsNames))
	}
}

func lookupOf(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestReadEnvoyEnv(t *testing.T) {
	tests := []struct {
		env   map[string]string
		flags map[string]string
		pass  string
	}{
		{map[string]string{}, map[string]string{
			"config": "/srv/runtime_data/current/config", "redis": "unix:///var/run/nutcracker/ratelimit.sock",
			"timeout": "10s"}, ""},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REDIS_AUTH": "secret",
			"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "PORT": "9080", "GRPC_PORT": "9081",
			"LOG_LEVEL": "WARNING", "LOG_FORMAT": "JSON", "CACHE_KEY_PREFIX": "rl_", "REDIS_TIMEOUT": "250ms",
			"LOCAL_CACHE_SIZE_IN_BYTES": "1048576"},
			map[string]string{"config": "/data/ratelimit/config", "redis": "redis://redis:6379",
				"http-addr": "0.0.0.0:9080", "grpc-addr": "0.0.0.0:9081", "log-level": "warn", "log-format": "json",
				"redis-prefix": "rl_", "timeout": "250ms", "local-cache-bytes": "1048576"}, "secret"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,s1:26379,s2:26379",
			"REDIS_AUTH": "alice:pw", "GRPC_UDS": "/run/rl.sock", "GRPC_PORT": "1"},
			map[string]string{"redis": "redis+sentinel://alice@s1:26379,s2:26379/mymaster", "grpc-addr": "unix:/run/rl.sock"}, "pw"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "CLUSTER", "REDIS_URL": "a:7000,b:7001", "REDIS_TLS": "true"},
			map[string]string{"redis": "rediss+cluster://a:7000,b:7001"}, ""},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6380", "REDIS_TLS": "true",
			"REDIS_TLS_CACERT": "/ca.pem", "REDIS_TLS_CLIENT_CERT": "/c.pem", "REDIS_TLS_CLIENT_KEY": "/k.pem",
			"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true", "GRPC_CLIENT_TLS_CACERT": "/clients.pem", "GRPC_CLIENT_TLS_SAN": "envoy.local"},
			map[string]string{"redis": "rediss://r:6380", "redis-tls-ca": "/ca.pem", "redis-tls-cert": "/c.pem",
				"redis-tls-key": "/k.pem", "redis-tls-insecure-skip-verify": "true", "tls-client-ca": "/clients.pem",
				"tls-client-san": "envoy.local"}, ""},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/s.pem", "GRPC_SERVER_TLS_KEY": "/s.key",
			"GRPC_CLIENT_TLS_CACERT": "/clients.pem"},
			map[string]string{"tls-cert": "/s.pem", "tls-key": "/s.key", "tls-grpc-only": "true", "tls-client-ca": "/clients.pem"}, ""},
	}
	for _, tc := range tests {
		es, err := readEnvoyEnv(lookupOf(tc.env))
		if err != nil {
			t.Errorf("%v: %v", tc.env, err)
			continue
		}
		for k, v := range tc.flags {
			if es.flags[k] != v {
				t.Errorf("%v: --%s = %q, want %q", tc.env, k, es.flags[k], v)
			}
		}
		if es.redisPassword != tc.pass {
			t.Errorf("%v: password %q, want %q", tc.env, es.redisPassword, tc.pass)
		}
	}
}

func TestReadEnvoyEnvRefusesAndNotices(t *testing.T) {
	for _, env := range []map[string]string{
		{"BACKEND_TYPE": "memcache"},
		{"CONFIG_TYPE": "GRPC_XDS_DELTA"},
		{"GRPC_SERVER_TLS_CERT": "", "GRPC_SERVER_USE_TLS": "true"},
		{"REDIS_TYPE": "ring"},
		{"REDIS_SOCKET_TYPE": "udp"},
		{"LOG_LEVEL": "loud"},
		{"SHADOW_MODE": "maybe"},
		{"NEAR_LIMIT_RATIO": "2"},
		{"LOCAL_CACHE_SIZE_IN_BYTES": "1MB"},
		{"PORT": "http"},
	} {
		var name string
		for k := range env {
			name = k
		}
		_, err := readEnvoyEnv(lookupOf(env))
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%v: error %v, want one naming %s", env, err, name)
		}
	}
	es, err := readEnvoyEnv(lookupOf(map[string]string{"USE_DOG_STATSD_MOGRIFIERS": "HITS", "REDIS_POOL_SIZE": "20",
		"SHADOW_MODE": "true", "QUOTA_MODE": "1", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true",
		"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "NEAR_LIMIT_RATIO": "0.9", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(es.notices) != 2 || !strings.HasPrefix(es.notices[0], "REDIS_POOL_SIZE") || !strings.HasPrefix(es.notices[1], "USE_DOG_STATSD_MOGRIFIERS") {
		t.Errorf("notices %q, want REDIS_POOL_SIZE's and USE_DOG_STATSD_MOGRIFIERS'", es.notices)
	}
	e := es.envoy
	if !e.Enabled || !e.ShadowMode || !e.QuotaMode || !e.StopIncrementWhenOverLimit || !e.ResponseHeaders || !e.HealthyWithAtLeastOneConfig || es.nearLimitRatio != 0.9 {
		t.Errorf("options %+v, near limit %v", e, es.nearLimitRatio)
	}
	if e.LimitHeader != "RateLimit-Limit" || e.RemainingHeader != "RateLimit-Remaining" || e.ResetHeader != "RateLimit-Reset" {
		t.Errorf("header names %q %q %q", e.LimitHeader, e.RemainingHeader, e.ResetHeader)
	}
}

// TestReadEnvoyEnvXDS: CONFIG_TYPE=GRPC_XDS_SOTW selects the xDS source with
// envoy's defaults (no --config), and its variables map to the
// --config-xds flags.
func TestReadEnvoyEnvXDS(t *testing.T) {
	es, err := readEnvoyEnv(lookupOf(map[string]string{"CONFIG_TYPE": "grpc_xds_sotw"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := es.flags["config"]; ok || es.flags["config-xds"] != "localhost:18000" || es.flags["config-xds-node-id"] != "default" {
		t.Fatalf("defaults: %v", es.flags)
	}
	es, err = readEnvoyEnv(lookupOf(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL": "xds:18001", "CONFIG_GRPC_XDS_NODE_ID": "init-test-node",
		"CONFIG_GRPC_XDS_NODE_METADATA": "zone=eu-1,team=payments", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "500ms",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/ca.pem",
		"CONFIG_GRPC_XDS_SERVER_TLS_SAN": "xds.local", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "authorization:Bearer t,x-team:payments"}))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"config-xds": "xds:18001", "config-xds-node-id": "init-test-node",
		"config-xds-node-metadata": "zone=eu-1,team=payments", "config-xds-retry": "500ms",
		"config-xds-tls": "true", "config-xds-ca": "/ca.pem", "config-xds-server-name": "xds.local",
		"config-xds-headers": "authorization:Bearer t,x-team:payments"} {
		if es.flags[k] != v {
			t.Errorf("--%s = %q, want %q", k, es.flags[k], v)
		}
	}
	for _, n := range es.notices {
		if strings.Contains(n, "XDS") {
			t.Errorf("notice for an honoured variable: %s", n)
		}
	}
	_, err = readEnvoyEnv(lookupOf(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "authorization"}))
	if err == nil || !strings.Contains(err.Error(), "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS") {
		t.Errorf("a header without a value: %v, want an error naming the variable", err)
	}
	_, err = readEnvoyEnv(lookupOf(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "soon"}))
	if err == nil || !strings.Contains(err.Error(), "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL") {
		t.Errorf("a bad retry interval: %v, want an error naming it", err)
	}
}

// TestReadEnvoyEnvPerSecond: REDIS_PERSECOND=true maps the REDIS_PERSECOND_*
// variables to the --redis-persecond flags as the REDIS_* ones map to
// --redis's; the REDIS_TLS_* files go to each Redis that speaks TLS (envoy
// builds one TLS configuration for both); without REDIS_PERSECOND=true the
// others are ignored with a notice, as envoy ignores them.
func TestReadEnvoyEnvPerSecond(t *testing.T) {
	tests := []struct {
		env        map[string]string
		flags      map[string]string
		unset      []string // flags that must not be set
		pass, sent string
	}{
		{map[string]string{"REDIS_PERSECOND": "true"},
			map[string]string{"redis-persecond": "unix:///var/run/nutcracker/ratelimitpersecond.sock"}, []string{"redis-persecond-timeout"}, "", ""},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "main:6379",
			"REDIS_PERSECOND": "TRUE", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": "fast:6380",
			"REDIS_PERSECOND_AUTH": "bob:pw2", "REDIS_PERSECOND_TLS": "true", "REDIS_PERSECOND_TIMEOUT": "75ms",
			"REDIS_TLS_CACERT": "/ca.pem", "REDIS_TLS_CLIENT_CERT": "/c.pem", "REDIS_TLS_CLIENT_KEY": "/k.pem",
			"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"},
			map[string]string{"redis": "redis://main:6379", "redis-persecond": "rediss://bob@fast:6380",
				"redis-persecond-timeout": "75ms", "redis-persecond-tls-ca": "/ca.pem", "redis-persecond-tls-cert": "/c.pem",
				"redis-persecond-tls-key": "/k.pem", "redis-persecond-tls-insecure-skip-verify": "true"},
			// The main Redis does not speak TLS: the files are not its.
			[]string{"redis-tls-ca", "redis-tls-cert", "redis-tls-key", "redis-tls-insecure-skip-verify"}, "pw2", ""},
		{map[string]string{"REDIS_PERSECOND": "1", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_TYPE": "sentinel",
			"REDIS_PERSECOND_URL": "fastmaster,s1:26379,s2:26379", "REDIS_PERSECOND_AUTH": "pw3", "REDIS_PERSECOND_SENTINEL_AUTH": "sentinel-user:spw"},
			map[string]string{"redis-persecond": "redis+sentinel://s1:26379,s2:26379/fastmaster?sentinel_username=sentinel-user"}, nil, "pw3", "spw"},
		{map[string]string{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_TYPE": "CLUSTER",
			"REDIS_PERSECOND_URL": "a:7000,b:7001", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "main:6379", "REDIS_TLS": "true", "REDIS_TLS_CACERT": "/ca.pem"},
			// REDIS_TLS is the main Redis's: the per-second one stays plain.
			map[string]string{"redis-persecond": "redis+cluster://a:7000,b:7001", "redis-tls-ca": "/ca.pem"},
			[]string{"redis-persecond-tls-ca"}, "", ""},
		// envoy's pipeline windows become the flush delays of both Redis
		// clients, beside the other URL parameters.
		{map[string]string{"REDIS_PERSECOND": "1", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_TYPE": "sentinel",
			"REDIS_PERSECOND_URL": "fastmaster,s1:26379", "REDIS_PERSECOND_SENTINEL_AUTH": "u:spw", "REDIS_PERSECOND_PIPELINE_WINDOW": "150us",
			"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "main:6379", "REDIS_PIPELINE_WINDOW": "0.5ms"},
			map[string]string{"redis": "redis://main:6379?max_flush_delay=500us",
				"redis-persecond": "redis+sentinel://s1:26379/fastmaster?sentinel_username=u&max_flush_delay=150us"}, nil, "", "spw"},
		{map[string]string{"REDIS_PERSECOND": "false", "REDIS_PERSECOND_URL": "fast:6380", "REDIS_PERSECOND_TIMEOUT": "bad"},
			map[string]string{}, []string{"redis-persecond", "redis-persecond-timeout"}, "", ""},
	}
	for _, tc := range tests {
		es, err := readEnvoyEnv(lookupOf(tc.env))
		if err != nil {
			t.Errorf("%v: %v", tc.env, err)
			continue
		}
		for k, v := range tc.flags {
			if es.flags[k] != v {
				t.Errorf("%v: --%s = %q, want %q", tc.env, k, es.flags[k], v)
			}
		}
		for _, k := range tc.unset {
			if v, ok := es.flags[k]; ok {
				t.Errorf("%v: --%s = %q, want it unset", tc.env, k, v)
			}
		}
		if es.psPassword != tc.pass || es.psSentinelPassword != tc.sent {
			t.Errorf("%v: per-second passwords %q, %q; want %q, %q", tc.env, es.psPassword, es.psSentinelPassword, tc.pass, tc.sent)
		}
		if es.redisPassword != "" || es.sentinelPassword != "" {
			t.Errorf("%v: the main Redis got a password: %q, %q", tc.env, es.redisPassword, es.sentinelPassword)
		}
	}

	// Malformed values are refused, naming the per-second variable.
	for _, env := range []map[string]string{
		{"REDIS_PERSECOND": "maybe"},
		{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_TYPE": "ring"},
		{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "udp"},
		{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": ""},
		{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_TLS": "yes please"},
		{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_TLS": "true", "REDIS_PERSECOND_SOCKET_TYPE": "unix"},
		{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_TIMEOUT": "soon"},
		{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_PIPELINE_WINDOW": "2ms"},
		{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_PIPELINE_WINDOW": "often"},
		{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_TYPE": "SENTINEL", "REDIS_PERSECOND_URL": "justamaster"},
	} {
		var name string
		for k := range env {
			if k != "REDIS_PERSECOND" || len(env) == 1 {
				name = k
			}
		}
		if env["REDIS_PERSECOND_TLS"] == "true" {
			name = "REDIS_PERSECOND_TLS"
		}
		if env["REDIS_PERSECOND_TYPE"] == "SENTINEL" {
			name = "REDIS_PERSECOND_URL"
		}
		_, err := readEnvoyEnv(lookupOf(env))
		if err == nil || !strings.Contains(err.Error(), name+":") {
			t.Errorf("%v: error %v, want one naming %s", env, err, name)
		}
	}

	// Notices: the client's tuning knobs always; the others when
	// REDIS_PERSECOND is not true.
	es, err := readEnvoyEnv(lookupOf(map[string]string{"REDIS_PERSECOND_URL": "fast:6380", "REDIS_PERSECOND_POOL_SIZE": "4"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(es.notices) != 2 || !strings.HasPrefix(es.notices[0], "REDIS_PERSECOND_POOL_SIZE: accepted and ignored") ||
		!strings.HasPrefix(es.notices[1], "REDIS_PERSECOND_URL: ignored: REDIS_PERSECOND is not true") {
		t.Errorf("notices %q", es.notices)
	}
	es, err = readEnvoyEnv(lookupOf(map[string]string{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": "fast.sock",
		"REDIS_PERSECOND_PIPELINE_LIMIT": "8", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR": "ERROR"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(es.notices) != 2 || !strings.HasPrefix(es.notices[0], "REDIS_PERSECOND_PIPELINE_LIMIT: accepted and ignored") ||
		!strings.HasPrefix(es.notices[1], "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR: accepted and ignored") {
		t.Errorf("notices %q", es.notices)
	}
}

// TestEnvoyStartup: REDIS_STARTUP_* read with envoy's defaults (1s, 30s,
// 0), and the waits of jpillora/backoff as envoy configures it (factor 2,
// jitter between the first interval and the doubled one, capped).
func TestEnvoyStartup(t *testing.T) {
	es, err := readEnvoyEnv(lookupOf(map[string]string{}))
	if err != nil {
		t.Fatal(err)
	}
	if want := (envoyStartup{Initial: time.Second, Max: 30 * time.Second}); es.startup != want {
		t.Fatalf("defaults %+v, want %+v", es.startup, want)
	}
	es, err = readEnvoyEnv(lookupOf(map[string]string{"REDIS_STARTUP_INITIAL_INTERVAL": "100ms",
		"REDIS_STARTUP_MAX_INTERVAL": "1s", "REDIS_STARTUP_MAX_ELAPSED_TIME": "1m"}))
	if err != nil {
		t.Fatal(err)
	}
	st := es.startup
	if want := (envoyStartup{Initial: 100 * time.Millisecond, Max: time.Second, Elapsed: time.Minute}); st != want {
		t.Fatalf("read %+v, want %+v", st, want)
	}
	for _, c := range []struct {
		n    int
		r    float64
		want time.Duration
	}{
		{1, 0.9, 100 * time.Millisecond}, // the first wait is the initial interval
		{2, 0, 100 * time.Millisecond},   // jitter's low end
		{2, 0.5, 150 * time.Millisecond}, // halfway to 200ms
		{4, 0.99, 793 * time.Millisecond},
		{5, 0.99, time.Second}, // capped
		{60, 0.5, time.Second},
	} {
		if got := st.wait(c.n, c.r); got != c.want {
			t.Errorf("wait(%d, %v) = %v, want %v", c.n, c.r, got, c.want)
		}
	}
	for name, v := range map[string]string{"REDIS_STARTUP_INITIAL_INTERVAL": "0", "REDIS_STARTUP_MAX_INTERVAL": "x",
		"REDIS_STARTUP_MAX_ELAPSED_TIME": "-1s"} {
		if _, err := readEnvoyEnv(lookupOf(map[string]string{name: v})); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: %v, want an error naming it", name, v, err)
		}
	}
}
