package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/server/storeurl"
)

// storeFlags are the flags of one Redis store of serve: --NAME URL and its
// companions --NAME-password-file, --NAME-sentinel-password-file,
// --NAME-tls-ca, --NAME-tls-cert, --NAME-tls-key and
// --NAME-tls-insecure-skip-verify. serve has two sets: --redis, the main
// store, and --redis-persecond, the store of the limits whose period is
// one second. Both open through storeurl.Open.
type storeFlags struct {
	name        string // the URL flag's name: redis, redis-persecond
	passEnv     string // the variable the password may come from instead of --NAME-password-file
	sentinelEnv string // the same for the Sentinels' password

	url, passFile, sentinelPassFile *string
	tlsCA, tlsCert, tlsKey          *string
	tlsSkip                         *bool
}

// addStoreFlags defines a store's flags on fs. the names its Redis in help
// texts ("the Redis", "the per-second Redis"); urlHelp is the URL flag's.
func addStoreFlags(fs *flag.FlagSet, name, the, urlHelp, passEnv, sentinelEnv string) *storeFlags {
	of, to := "", the
	if name == "redis" {
		to = "Redis"
	} else {
		of = " of " + the
	}
	f := &storeFlags{name: name, passEnv: passEnv, sentinelEnv: sentinelEnv}
	f.url = fs.String(name, "", urlHelp)
	f.passFile = fs.String(name+"-password-file", "", fmt.Sprintf("`file` holding %s password (also $%s), instead of one in the --%s URL", the, passEnv, name))
	f.sentinelPassFile = fs.String(name+"-sentinel-password-file", "", fmt.Sprintf("`file` holding the Sentinels' password%s (also $%s), instead of ?sentinel_password=", of, sentinelEnv))
	f.tlsCA = fs.String(name+"-tls-ca", "", fmt.Sprintf("CA certificates `file` (PEM) %s server's certificate may be signed by, besides the system's; needs a rediss:// URL", the))
	f.tlsCert = fs.String(name+"-tls-cert", "", fmt.Sprintf("client certificate `file` (PEM) to present to %s (with --%s-tls-key); reloaded when it changes", to, name))
	f.tlsKey = fs.String(name+"-tls-key", "", fmt.Sprintf("client private key `file` (PEM) for --%s-tls-cert", name))
	f.tlsSkip = fs.Bool(name+"-tls-insecure-skip-verify", false, fmt.Sprintf("do not verify that %s server's certificate names the host dialled (its chain is still verified, against --%s-tls-ca or the system's CAs): for Cluster nodes and Sentinel masters known by IP", the, name))
	return f
}

// passwords reads the store's passwords: from --NAME-password-file or
// $passEnv, and from --NAME-sentinel-password-file or $sentinelEnv; "" for
// none.
func (f *storeFlags) passwords() (pass, sentinel string, err error) {
	if pass, err = readSecret("--"+f.name+"-password-file", *f.passFile, f.passEnv); err != nil {
		return "", "", err
	}
	if sentinel, err = readSecret("--"+f.name+"-sentinel-password-file", *f.sentinelPassFile, f.sentinelEnv); err != nil {
		return "", "", err
	}
	return pass, sentinel, nil
}

// open opens the store (storeurl.Open) with its passwords and TLS
// options; an empty URL is the embedded memory backend, with memory's
// options.
func (f *storeFlags) open(prefix string, timeout time.Duration, pass, sentinel string, logger *slog.Logger, memory ...backend.Option) (backend.Backend, io.Closer, error) {
	return storeurl.Open(*f.url, prefix, timeout,
		storeurl.Flag(f.name),
		storeurl.RedisPassword(pass), storeurl.SentinelPassword(sentinel),
		storeurl.RedisTLS(storeurl.RedisTLSOptions{CAFile: *f.tlsCA, CertFile: *f.tlsCert, KeyFile: *f.tlsKey, SkipHostnameVerification: *f.tlsSkip}),
		storeurl.Logger(logger),
		storeurl.MemoryOptions(memory...))
}

// tlsGiven reports whether any of the store's TLS flags is set.
func (f *storeFlags) tlsGiven() bool {
	return *f.tlsCA != "" || *f.tlsCert != "" || *f.tlsKey != "" || *f.tlsSkip
}
