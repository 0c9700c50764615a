// Package storeurl opens the store a URL names for floodgate serve: the
// embedded memory backend, or a Redis server, Cluster or Sentinel master
// through rueidis (backend/rueidisadapter), with TLS files that are read
// again when they change and errors that never show a password.
package storeurl

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	neturl "net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/backend/rueidisadapter"
	"github.com/floodgate-dev/floodgate/server/internal/tlsfiles"
)

// Open returns the backend a URL names, and a Closer for it:
//
//	""  or  memory://                                   the embedded memory backend (state in this process)
//	redis://[user:pass@]host:port[/db]                  a Redis server; a Cluster is detected by itself
//	rediss://...                                        the same over TLS (?skip_verify=true to skip verification;
//	                                                    RedisTLS adds a CA file and a client certificate)
//	unix:///path/to/redis.sock[?db=N]                   a Redis server on a unix socket
//	redis://host1:port,host2:port                       Cluster seed nodes (also redis+cluster://, or ?addr=host2:port)
//	redis+sentinel://[user:pass@]h1:26379,h2:26379/mymaster[/db]
//	                                                    Sentinel: the master named mymaster (also rediss+sentinel://,
//	                                                    or redis://h1:26379?master_set=mymaster); credentials are the master's,
//	                                                    ?sentinel_password=... authenticates to the sentinels
//	                                                    (as ?sentinel_username=..., an ACL user, when given)
//
// RedisTLS adds a CA file, a client certificate and host-name leniency to
// the TLS of rediss:// URLs (standalone, Cluster and Sentinel alike).
//
// ?max_flush_delay=20us lets each write to Redis wait up to that long to
// gather more commands (rueidis's MaxFlushDelay; at most 1ms): fewer system
// calls per decision under load, for at most that much latency. Other query
// parameters are rueidis.ParseURL's (dial_timeout, client_name, protocol=2,
// ...). State keys start with prefix (for example "floodgate").
// Open checks that the store answers within timeout.
//
// Passwords can stay out of the URL (and so out of argv and process
// listings): RedisPassword and SentinelPassword give them separately; a
// password given both ways is an error. Every error Open returns shows
// the URL redacted (Redact) and never contains a password.
func Open(url, prefix string, timeout time.Duration, opts ...Option) (backend.Backend, io.Closer, error) {
	var sc storeConfig
	for _, o := range opts {
		o(&sc)
	}
	if url == "" || url == "memory://" || url == "memory" {
		if o := sc.tls; o.Enable || o.files() || o.SkipHostnameVerification {
			return nil, nil, errors.New("the Redis TLS options (a CA, a client certificate) are given but no Redis URL")
		}
		m := backend.NewMemory(sc.memory...)
		return m, m, nil
	}
	secrets := append(urlSecrets(url), sc.password, sc.sentinelPassword)
	fail := func(err error) (backend.Backend, io.Closer, error) {
		return nil, nil, fmt.Errorf("--%s %s: %s", sc.flagName(), Redact(url), redactSecrets(err.Error(), secrets...))
	}
	// unreachable is fail for a store that did not answer as asked
	// (dial, handshake, authentication, PING): ErrUnreachable.
	unreachable := func(err error) (backend.Backend, io.Closer, error) {
		_, _, err = fail(err)
		return nil, nil, unreachableError{err}
	}
	opt, err := parseRedisURL(url)
	if err != nil {
		return fail(err)
	}
	if sc.password != "" {
		if opt.Password != "" {
			return fail(errors.New("the Redis password is given twice: in the URL and separately; keep one (preferably not the URL)"))
		}
		opt.Password = sc.password
	}
	if sc.sentinelPassword != "" {
		if opt.Sentinel.MasterSet == "" {
			return fail(errors.New("a Sentinel password is given but the URL names no Sentinel master (redis+sentinel://host:26379/mymaster)"))
		}
		if opt.Sentinel.Password != "" {
			return fail(errors.New("the Sentinel password is given twice: in the URL (sentinel_password) and separately; keep one"))
		}
		opt.Sentinel.Password = sc.sentinelPassword
	}
	if err := applyRedisTLS(&opt, url, sc.tls, sc.logger); err != nil {
		return fail(err)
	}
	opt.DisableCache = true // floodgate runs scripts; client-side caching only costs
	if timeout > 0 {
		opt.Dialer.Timeout = timeout
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return unreachable(fmt.Errorf("%w%s", err, tlsHint(err, opt.TLSConfig != nil, sc.tls, sc.flagName())))
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, time.Second))
	defer cancel()
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return unreachable(fmt.Errorf("PING: %w%s", err, tlsHint(err, opt.TLSConfig != nil, sc.tls, sc.flagName())))
	}
	b, err := rueidisadapter.New(c, backend.WithPrefix(prefix))
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return b, closer(func() error { b.Close(); c.Close(); return nil }), nil
}

// ErrUnreachable matches (errors.Is) an Open error of a store that did
// not answer as asked: it could not be dialled, the TLS handshake or the
// authentication failed, or PING got no answer in time. Trying again may
// succeed, unlike after a bad URL or an unreadable TLS file.
var ErrUnreachable = errors.New("storeurl: the store does not answer")

type unreachableError struct{ err error }

func (e unreachableError) Error() string        { return e.err.Error() }
func (e unreachableError) Is(target error) bool { return target == ErrUnreachable }

// Option configures Open.
type Option func(*storeConfig)

type storeConfig struct {
	password, sentinelPassword string
	memory                     []backend.Option
	tls                        RedisTLSOptions
	logger                     *slog.Logger
	flag                       string // the store's flag, for messages: "redis" by default
}

func (c *storeConfig) flagName() string {
	if c.flag == "" {
		return "redis"
	}
	return c.flag
}

// Flag names the command-line flag that gave the store's URL, without
// its dashes ("redis" by default, "redis-persecond" for the per-second
// store): errors start with it, and their hints name its companions
// (--FLAG-tls-ca, ...).
func Flag(name string) Option { return func(c *storeConfig) { c.flag = name } }

// RedisTLSOptions configure TLS to Redis, beyond a rediss:// URL's
// defaults (the system's CAs, the host name verified, no client
// certificate). They are envoyproxy/ratelimit's REDIS_TLS_* settings.
type RedisTLSOptions struct {
	// Enable speaks TLS even when the URL says redis:// (REDIS_TLS=true).
	// Without it the options below need a rediss:// URL.
	Enable bool
	// CAFile is a PEM file of CA certificates that the server's
	// certificate may be signed by, besides the system's
	// (REDIS_TLS_CACERT).
	CAFile string
	// CertFile and KeyFile are a client certificate and key, PEM, to
	// present to a server that asks for one (tls-auth-clients)
	// (REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY).
	CertFile, KeyFile string
	// SkipHostnameVerification verifies the server's certificate chain
	// but not that it names the host dialled
	// (REDIS_TLS_SKIP_HOSTNAME_VERIFICATION): for Cluster nodes and
	// Sentinel masters known by IP addresses their certificates lack.
	SkipHostnameVerification bool
}

func (o RedisTLSOptions) files() bool { return o.CAFile != "" || o.CertFile != "" || o.KeyFile != "" }

// RedisTLS configures TLS to Redis. The CA and the client certificate are
// read again when their files change: each new connection uses the files'
// current content (a reload that fails is logged, see Logger, and the
// previous content stays in use).
func RedisTLS(o RedisTLSOptions) Option { return func(c *storeConfig) { c.tls = o } }

// Logger receives the store's events: certificate reloads.
func Logger(l *slog.Logger) Option { return func(c *storeConfig) { c.logger = l } }

// RedisPassword authenticates to Redis with p instead of a password in the
// URL (a user name, if any, stays in the URL). "" changes nothing.
func RedisPassword(p string) Option { return func(c *storeConfig) { c.password = p } }

// SentinelPassword authenticates to the Sentinels of a redis+sentinel:// URL
// with p instead of ?sentinel_password=. "" changes nothing.
func SentinelPassword(p string) Option { return func(c *storeConfig) { c.sentinelPassword = p } }

// MemoryOptions are the options of the embedded memory backend, used when
// the URL names no Redis.
func MemoryOptions(opts ...backend.Option) Option {
	return func(c *storeConfig) { c.memory = append(c.memory, opts...) }
}

// applyRedisTLS sets up TLS for every connection opt makes (to
// standalone servers, Cluster nodes, Sentinels and their masters): each
// verifies the host it dials (not only the URL's first host), with o's CA
// and client certificate as their files currently are.
func applyRedisTLS(opt *rueidis.ClientOption, url string, o RedisTLSOptions, log *slog.Logger) error {
	isUnix := strings.HasPrefix(url, "unix:")
	if opt.TLSConfig == nil {
		if !o.Enable && !o.files() && !o.SkipHostnameVerification {
			return nil
		}
		if !o.Enable || isUnix {
			return errors.New("TLS options (CA, client certificate, host name verification) are given but the URL does not use TLS: write rediss:// (rediss+sentinel://, rediss+cluster://)")
		}
		opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if opt.Sentinel.MasterSet != "" {
			opt.Sentinel.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return errors.New("TLS: a client certificate needs both a certificate and a key file")
	}
	var ca *tlsfiles.Reloading[*x509.CertPool]
	var cert *tlsfiles.Reloading[*tls.Certificate]
	var err error
	if o.CAFile != "" {
		ca, err = tlsfiles.NewReloading("Redis TLS CA", log, func() (*x509.CertPool, error) { return tlsfiles.LoadCAPool(o.CAFile, true) }, o.CAFile)
		if err != nil {
			return fmt.Errorf("TLS: %w", err)
		}
	}
	if o.CertFile != "" {
		cert, err = tlsfiles.NewReloading("Redis TLS client certificate", log, func() (*tls.Certificate, error) {
			return tlsfiles.LoadKeyPair(o.CertFile, o.KeyFile)
		}, o.CertFile, o.KeyFile)
		if err != nil {
			return fmt.Errorf("TLS: %w", err)
		}
	}
	// rueidis verifies every connection against the URL's first host; each
	// connection verifies the host it dials instead.
	opt.TLSConfig.ServerName = ""
	if opt.Sentinel.TLSConfig != nil {
		opt.Sentinel.TLSConfig.ServerName = ""
	}
	opt.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, base *tls.Config) (net.Conn, error) {
		if base == nil { // a Sentinel without TLS
			return d.DialContext(ctx, "tcp", dst)
		}
		conf := base.Clone()
		if conf.ServerName == "" {
			conf.ServerName, _, _ = net.SplitHostPort(dst)
		}
		if ca != nil {
			conf.RootCAs = ca.Get()
		}
		if cert != nil {
			conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert.Get(), nil }
		}
		if o.SkipHostnameVerification && !conf.InsecureSkipVerify {
			conf.InsecureSkipVerify = true // and the chain verified below
			conf.VerifyConnection = verifyChain(conf.RootCAs)
		}
		return (&tls.Dialer{NetDialer: d, Config: conf}).DialContext(ctx, "tcp", dst)
	}
	return nil
}

// verifyChain verifies a server's certificate chain against roots (the
// system's when nil) without its host name.
func verifyChain(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("tls: the server sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(opts)
		return err
	}
}

// tlsHint explains the common TLS failures of a first connection.
func tlsHint(err error, tlsOn bool, o RedisTLSOptions, flag string) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	msg := err.Error()
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(msg, s) {
				return true
			}
		}
		return false
	}
	switch {
	case errors.As(err, &unknown) || has("unknown authority"):
		if o.CAFile != "" {
			return fmt.Sprintf(" (the server's certificate is signed by no CA in %s nor the system's)", o.CAFile)
		}
		return " (the server's certificate is signed by no CA the system trusts: give its CA file, --" + flag + "-tls-ca)"
	case errors.As(err, &host) || has("certificate is valid for", "cannot validate certificate for"):
		return " (the server's certificate does not name the host dialled; --" + flag + "-tls-insecure-skip-verify verifies its chain only)"
	case has("first record does not look like a TLS handshake"):
		return " (the server does not speak TLS: redis:// rather than rediss://?)"
	case !tlsOn && has("connection reset", "EOF"):
		return " (the server closed the connection: if it speaks only TLS, write rediss://)"
	case !tlsOn:
		return ""
	case o.CertFile == "" && has("certificate required", "connection reset", "EOF", "broken pipe"):
		return " (the server closed the connection after the TLS handshake: does it require a client certificate? --" + flag + "-tls-cert and --" + flag + "-tls-key)"
	case has("bad certificate", "unknown certificate authority", "certificate required", "connection reset", "EOF", "broken pipe"):
		return fmt.Sprintf(" (the server closed the connection after the TLS handshake: does it trust the CA of the client certificate %s?)", o.CertFile)
	}
	return ""
}

type closer func() error

func (f closer) Close() error { return f() }

// maxFlushDelay is the longest ?max_flush_delay= accepted: beyond it, the
// wait would cost more latency than any batching saves.
const maxFlushDelay = time.Millisecond

// parseRedisURL reads the forms Open documents into rueidis options.
// ?max_flush_delay=D (a Go duration, at most 1ms) sets rueidis's
// MaxFlushDelay on every form: each write to Redis waits up to D to gather
// more commands.
func parseRedisURL(s string) (rueidis.ClientOption, error) {
	s, delay, err := cutFlushDelay(s)
	if err != nil {
		return rueidis.ClientOption{}, err
	}
	opt, err := parseRedisAddr(s)
	opt.MaxFlushDelay = delay
	return opt, err
}

// cutFlushDelay returns s without its max_flush_delay query parameter, and
// that parameter's value (0 when absent).
func cutFlushDelay(s string) (string, time.Duration, error) {
	base, query, ok := strings.Cut(s, "?")
	if !ok {
		return s, 0, nil
	}
	var kept []string
	var delay time.Duration
	for _, kv := range strings.Split(query, "&") {
		v, ok := strings.CutPrefix(kv, "max_flush_delay=")
		if !ok {
			kept = append(kept, kv)
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > maxFlushDelay {
			return "", 0, fmt.Errorf("max_flush_delay=%s: want a duration from 0 to %v, such as 20us", v, maxFlushDelay)
		}
		delay = d
	}
	if len(kept) == 0 {
		return base, delay, nil
	}
	return base + "?" + strings.Join(kept, "&"), delay, nil
}

// parseRedisAddr is parseRedisURL without max_flush_delay.
func parseRedisAddr(s string) (rueidis.ClientOption, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		// A bare list of addresses: host:port[,host:port...].
		scheme, rest = "redis", s
	}
	sentinel := false
	switch scheme {
	case "redis+sentinel", "rediss+sentinel":
		sentinel = true
		scheme = strings.TrimSuffix(scheme, "+sentinel")
	case "redis+cluster", "rediss+cluster":
		scheme = strings.TrimSuffix(scheme, "+cluster")
	case "redis", "rediss", "unix", "valkey", "valkeys":
	default:
		return rueidis.ClientOption{}, fmt.Errorf("unknown scheme %q: want redis, rediss, unix, redis+sentinel or redis+cluster", scheme)
	}
	if scheme == "unix" {
		return rueidis.ParseURL(s)
	}
	authority, path, _ := strings.Cut(rest, "/")
	var query string
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path, query = path[:i], path[i+1:]
	} else if i := strings.IndexByte(authority, '?'); i >= 0 {
		authority, query = authority[:i], authority[i+1:]
	}
	userinfo := ""
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		userinfo, authority = authority[:i+1], authority[i+1:]
	}
	hosts := strings.Split(authority, ",")
	for _, h := range hosts {
		if h == "" {
			return rueidis.ClientOption{}, errors.New("an empty address in the host list")
		}
	}
	var q []string
	if query != "" {
		q = append(q, query)
	}
	for _, h := range hosts[1:] {
		q = append(q, "addr="+h)
	}
	var sentinelUser, sentinelPass string
	var master string
	if sentinel {
		parts := strings.Split(path, "/")
		master = parts[0]
		if master == "" {
			return rueidis.ClientOption{}, errors.New("a Sentinel URL names the master: redis+sentinel://host:26379/mymaster")
		}
		path = ""
		if len(parts) > 1 {
			if _, err := strconv.Atoi(parts[1]); err != nil {
				return rueidis.ClientOption{}, fmt.Errorf("database %q is not a number", parts[1])
			}
			path = parts[1]
		}
		if len(parts) > 2 {
			return rueidis.ClientOption{}, errors.New("a Sentinel URL's path is /master[/db]")
		}
	}
	// Pull out the parameters rueidis does not know.
	var kept []string
	for _, kv := range strings.Split(strings.Join(q, "&"), "&") {
		if kv == "" {
			continue
		}
		if v, ok := strings.CutPrefix(kv, "sentinel_password="); ok {
			sentinelPass = v
			continue
		}
		if v, ok := strings.CutPrefix(kv, "sentinel_username="); ok {
			name, err := neturl.QueryUnescape(v)
			if err != nil {
				return rueidis.ClientOption{}, fmt.Errorf("sentinel_username: %w", err)
			}
			sentinelUser = name
			continue
		}
		kept = append(kept, kv)
	}
	u := scheme + "://" + userinfo + hosts[0]
	if path != "" {
		u += "/" + path
	}
	if len(kept) > 0 {
		u += "?" + strings.Join(kept, "&")
	}
	opt, err := rueidis.ParseURL(u)
	if err != nil {
		return opt, err
	}
	if sentinel {
		opt.Sentinel.MasterSet = master
	}
	if sentinelUser != "" && opt.Sentinel.MasterSet == "" {
		return opt, errors.New("sentinel_username is given but the URL names no Sentinel master (redis+sentinel://host:26379/mymaster)")
	}
	if opt.Sentinel.MasterSet != "" {
		opt.Sentinel.Username = sentinelUser
		opt.Sentinel.Password = sentinelPass
		if opt.TLSConfig != nil {
			opt.Sentinel.TLSConfig = opt.TLSConfig.Clone()
		}
	}
	return opt, nil
}

// Redact returns a Redis URL fit for logs and messages: the password of
// its user information and the values of its password query parameters
// (sentinel_password, password) are replaced by "xxxxx".
func Redact(s string) string {
	return redactSecrets(s, urlSecrets(s)...)
}

// urlSecrets returns the passwords a URL carries: in its user information
// and in query parameters whose name contains "password".
func urlSecrets(s string) []string {
	var out []string
	rest, query, _ := strings.Cut(s, "?")
	if _, authority, ok := strings.Cut(rest, "://"); ok {
		authority, _, _ = strings.Cut(authority, "/")
		if at := strings.LastIndexByte(authority, '@'); at >= 0 {
			if _, pass, ok := strings.Cut(authority[:at], ":"); ok {
				out = append(out, pass)
			}
		}
	}
	for _, kv := range strings.Split(query, "&") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.Contains(strings.ToLower(k), "password") {
			out = append(out, v)
		}
	}
	return out
}

// redactSecrets replaces every non-empty secret in msg, as given and as a
// URL would escape it, by "xxxxx": for URLs, and for error messages of
// libraries that may quote what they were given.
func redactSecrets(msg string, secrets ...string) string {
	for _, s := range secrets {
		if s == "" {
			continue
		}
		msg = strings.ReplaceAll(msg, s, "xxxxx")
		if u, err := neturl.PathUnescape(s); err == nil && u != "" {
			msg = strings.ReplaceAll(msg, u, "xxxxx")
		}
		if e := neturl.QueryEscape(s); e != s {
			msg = strings.ReplaceAll(msg, e, "xxxxx")
		}
	}
	return msg
}
