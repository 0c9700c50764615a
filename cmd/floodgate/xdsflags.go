package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/floodgate-dev/floodgate/server/xds"
)

// xdsFlags are serve's flags of the xDS configuration source
// (xds.Options).
type xdsFlags struct {
	addr, nodeID, nodeMeta    *string
	headers                   *string
	useTLS, wait              *bool
	ca, cert, key, serverName *string
	retry                     *time.Duration
}

func addXDSFlags(fs *flag.FlagSet) *xdsFlags {
	return &xdsFlags{
		addr:       fs.String("config-xds", "", "xDS management server `address` (host:port): take the configuration from its RateLimitConfig resources (ADS, state of the world) instead of --config"),
		nodeID:     fs.String("config-xds-node-id", "default", "node `id` sent to the xDS management server (a snapshot cache keys snapshots by it)"),
		nodeMeta:   fs.String("config-xds-node-metadata", "", "node metadata sent to the xDS management server: `k1=v1,k2=v2`"),
		headers:    fs.String("config-xds-headers", "", "extra gRPC headers on the xDS stream, `name:value,name:value` (for example an authorization header)"),
		retry:      fs.Duration("config-xds-retry", xds.DefaultRetryInterval, "first delay before connecting to the xDS management server again; doubles up to a minute while it stays away"),
		wait:       fs.Bool("config-xds-wait", false, "serve the APIs only once the first xDS configuration has been received (as envoyproxy/ratelimit without FORCE_START_WITHOUT_INITIAL_CONFIG); by default they serve at once and answer \"no configuration\" until then"),
		useTLS:     fs.Bool("config-xds-tls", false, "connect to the xDS management server over TLS (system roots, plus --config-xds-ca)"),
		ca:         fs.String("config-xds-ca", "", "CA certificates `file` (PEM) the xDS management server's certificate may be signed by (implies --config-xds-tls)"),
		cert:       fs.String("config-xds-cert", "", "client certificate `file` (PEM) to present to the xDS management server (with --config-xds-key; implies --config-xds-tls)"),
		key:        fs.String("config-xds-key", "", "client private key `file` (PEM) for --config-xds-cert"),
		serverName: fs.String("config-xds-server-name", "", "`name` the xDS management server's certificate must carry, instead of the address's host"),
	}
}

// options returns the xDS options the flags give; nil without --config-xds.
func (f *xdsFlags) options() (*xds.Options, error) {
	if *f.addr == "" {
		return nil, nil
	}
	o := &xds.Options{Address: *f.addr, NodeID: *f.nodeID, RetryInterval: *f.retry, WaitFirst: *f.wait}
	if *f.nodeMeta != "" {
		o.NodeMetadata = xds.ParseNodeMetadata(*f.nodeMeta)
	}
	if *f.headers != "" {
		h, err := xds.ParseHeaders(*f.headers)
		if err != nil {
			return nil, fmt.Errorf("--config-xds-headers: %w", err)
		}
		o.Headers = h
	}
	if *f.retry <= 0 {
		return nil, errors.New("--config-xds-retry must be positive")
	}
	if (*f.cert == "") != (*f.key == "") {
		return nil, errors.New("--config-xds-cert and --config-xds-key go together")
	}
	if *f.useTLS || *f.ca != "" || *f.cert != "" || *f.serverName != "" {
		c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: *f.serverName}
		if *f.ca != "" {
			pem, err := os.ReadFile(*f.ca)
			if err != nil {
				return nil, fmt.Errorf("--config-xds-ca: %w", err)
			}
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--config-xds-ca: no PEM certificate in %s", *f.ca)
			}
			c.RootCAs = pool
		}
		if *f.cert != "" {
			kp, err := tls.LoadX509KeyPair(*f.cert, *f.key)
			if err != nil {
				return nil, fmt.Errorf("--config-xds-cert: %w", err)
			}
			c.Certificates = []tls.Certificate{kp}
		}
		o.TLS = c
	}
	return o, nil
}

// envoyXDSEnv maps envoy's CONFIG_GRPC_XDS_* variables (CONFIG_TYPE=
// GRPC_XDS_SOTW) to the --config-xds flags, with envoy's defaults.
func envoyXDSEnv(es *envoySettings, get func(name, def string) string, boolean func(name string, def bool) bool, bad func(name, format string, args ...any)) {
	es.flags["config-xds"] = get("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000")
	es.flags["config-xds-node-id"] = get("CONFIG_GRPC_XDS_NODE_ID", "default")
	// envoy starts serving once the first configuration has come, unless
	// FORCE_START_WITHOUT_INITIAL_CONFIG.
	es.flags["config-xds-wait"] = strconv.FormatBool(!boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false))
	if v := get("CONFIG_GRPC_XDS_NODE_METADATA", ""); v != "" {
		es.flags["config-xds-node-metadata"] = v
	}
	if v := get("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", ""); v != "" {
		if _, err := xds.ParseHeaders(v); err != nil {
			bad("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "%v", err)
		} else {
			es.flags["config-xds-headers"] = v
		}
	}
	if v := get("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", ""); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			bad("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "%q is not a positive duration (3s)", v)
		} else {
			es.flags["config-xds-retry"] = d.String()
		}
	}
	if boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false) {
		es.flags["config-xds-tls"] = "true"
		for name, flag := range map[string]string{
			"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":   "config-xds-cert",
			"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":    "config-xds-key",
			"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "config-xds-ca",
			"CONFIG_GRPC_XDS_SERVER_TLS_SAN":    "config-xds-server-name",
		} {
			if v := get(name, ""); v != "" {
				es.flags[flag] = v
			}
		}
	}
}
