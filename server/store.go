package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/backend/rueidisadapter"
)

// OpenStore returns the backend a URL names, and a Closer for it:
//
//	""  or  memory://                                   the embedded memory backend (state in this process)
//	redis://[user:pass@]host:port[/db]                  a Redis server; a Cluster is detected by itself
//	rediss://...                                        the same over TLS (?skip_verify=true to skip verification)
//	unix:///path/to/redis.sock[?db=N]                   a Redis server on a unix socket
//	redis://host1:port,host2:port                       Cluster seed nodes (also redis+cluster://, or ?addr=host2:port)
//	redis+sentinel://[user:pass@]h1:26379,h2:26379/mymaster[/db]
//	                                                    Sentinel: the master named mymaster (also rediss+sentinel://,
//	                                                    or redis://h1:26379?master_set=mymaster); credentials are the master's,
//	                                                    ?sentinel_password=... authenticates to the sentinels
//
// Other query parameters are rueidis.ParseURL's (dial_timeout, client_name,
// protocol=2, ...). State keys start with prefix (for example "floodgate").
// OpenStore checks that the store answers within timeout.
func OpenStore(url, prefix string, timeout time.Duration) (backend.Backend, io.Closer, error) {
	if url == "" || url == "memory://" || url == "memory" {
		m := backend.NewMemory()
		return m, m, nil
	}
	opt, err := parseRedisURL(url)
	if err != nil {
		return nil, nil, fmt.Errorf("--redis %s: %w", redactURL(url), err)
	}
	opt.DisableCache = true // floodgate runs scripts; client-side caching only costs
	if timeout > 0 {
		opt.Dialer.Timeout = timeout
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, nil, fmt.Errorf("--redis %s: %w", redactURL(url), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, time.Second))
	defer cancel()
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("--redis %s: PING: %w", redactURL(url), err)
	}
	b, err := rueidisadapter.New(c, backend.WithPrefix(prefix))
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return b, closer(func() error { b.Close(); c.Close(); return nil }), nil
}

type closer func() error

func (f closer) Close() error { return f() }

// parseRedisURL reads the forms OpenStore documents into rueidis options.
func parseRedisURL(s string) (rueidis.ClientOption, error) {
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
	var sentinelPass string
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
	if opt.Sentinel.MasterSet != "" {
		opt.Sentinel.Password = sentinelPass
		if opt.TLSConfig != nil {
			opt.Sentinel.TLSConfig = opt.TLSConfig.Clone()
		}
	}
	return opt, nil
}

// redactURL hides a password in a URL for messages.
func redactURL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return s
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return s
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}
