package storeurl

import (
	"strings"
	"testing"
	"time"
)

func TestParseRedisURL(t *testing.T) {
	cases := []struct {
		url    string
		addrs  []string
		master string
		db     int
		tls    bool
		user   string
		pass   string
	}{
		{url: "redis://localhost:6379", addrs: []string{"localhost:6379"}},
		{url: "redis://u:p@h:1/2", addrs: []string{"h:1"}, db: 2, user: "u", pass: "p"},
		{url: "rediss://h:6380", addrs: []string{"h:6380"}, tls: true},
		{url: "h1:7000,h2:7001", addrs: []string{"h1:7000", "h2:7001"}},
		{url: "redis://h1:7000,h2:7001,h3:7002", addrs: []string{"h1:7000", "h2:7001", "h3:7002"}},
		{url: "redis+cluster://h1:7000,h2:7001", addrs: []string{"h1:7000", "h2:7001"}},
		{url: "redis+sentinel://s1:26379,s2:26379/mymaster", addrs: []string{"s1:26379", "s2:26379"}, master: "mymaster"},
		{url: "redis+sentinel://:pw@s1:26379/mymaster/3?sentinel_password=sp", addrs: []string{"s1:26379"}, master: "mymaster", db: 3, pass: "pw"},
		{url: "redis://s1:26379?master_set=m", addrs: []string{"s1:26379"}, master: "m"},
	}
	for _, c := range cases {
		opt, err := parseRedisURL(c.url)
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if strings.Join(opt.InitAddress, ",") != strings.Join(c.addrs, ",") || opt.Sentinel.MasterSet != c.master ||
			opt.SelectDB != c.db || (opt.TLSConfig != nil) != c.tls || opt.Username != c.user || opt.Password != c.pass {
			t.Errorf("%s: got addrs %v master %q db %d tls %v user %q pass %q", c.url, opt.InitAddress, opt.Sentinel.MasterSet, opt.SelectDB, opt.TLSConfig != nil, opt.Username, opt.Password)
		}
	}
	// ?sentinel_username= is the Sentinels' ACL user (envoy's
	// REDIS_SENTINEL_AUTH user:password), query-escaped.
	opt, err := parseRedisURL("redis+sentinel://s1:26379/m?sentinel_username=a+b%26c&sentinel_password=sp")
	if err != nil || opt.Sentinel.Username != "a b&c" || opt.Sentinel.Password != "sp" || opt.Username != "" {
		t.Errorf("sentinel_username: Sentinel user %q password %q, user %q, %v; want \"a b&c\", \"sp\", \"\"", opt.Sentinel.Username, opt.Sentinel.Password, opt.Username, err)
	}
	// ?max_flush_delay= is rueidis's MaxFlushDelay, on every form; the
	// other parameters are kept.
	for url, want := range map[string]time.Duration{
		"redis://h:1?max_flush_delay=20us":                                   20 * time.Microsecond,
		"redis://h:1/2?client_name=x&max_flush_delay=1ms":                    time.Millisecond,
		"unix:///tmp/r.sock?max_flush_delay=50us&db=3":                       50 * time.Microsecond,
		"redis+sentinel://s1:26379/m?max_flush_delay=0s&sentinel_password=p": 0,
		"h1:7000,h2:7001?max_flush_delay=10us":                               10 * time.Microsecond,
		"redis://h:1":                                                        0,
	} {
		opt, err := parseRedisURL(url)
		if err != nil || opt.MaxFlushDelay != want {
			t.Errorf("%s: MaxFlushDelay %v, %v; want %v", url, opt.MaxFlushDelay, err, want)
		}
	}
	if opt, err := parseRedisURL("redis://h:1/2?client_name=x&max_flush_delay=1ms"); err != nil || opt.ClientName != "x" || opt.SelectDB != 2 {
		t.Errorf("the parameters beside max_flush_delay: client %q db %d, %v", opt.ClientName, opt.SelectDB, err)
	}
	if opt, err := parseRedisURL("unix:///tmp/r.sock?max_flush_delay=50us&db=3"); err != nil || opt.SelectDB != 3 {
		t.Errorf("unix socket with max_flush_delay: db %d, %v", opt.SelectDB, err)
	}
	for url, want := range map[string]string{
		"redis://h:1?max_flush_delay=2ms":  "max_flush_delay=2ms: want a duration from 0 to 1ms",
		"redis://h:1?max_flush_delay=-1us": "max_flush_delay=-1us",
		"redis://h:1?max_flush_delay=fast": "max_flush_delay=fast",
		"redis://h:1?sentinel_username=u":  "names no Sentinel master",
		"http://h":                         "unknown scheme",
		"redis+sentinel://s1:1":            "names the master",
		"redis+sentinel://s1:1/m/x":        "not a number",
		"redis://h1,,h2":                   "empty address",
	} {
		if _, err := parseRedisURL(url); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", url, err, want)
		}
	}
	if got := Redact("redis://u:secret@h:1"); strings.Contains(got, "secret") {
		t.Errorf("Redact kept the password: %s", got)
	}
}

// TestRedisTLSOptionsTopologies: TLS options reach every connection of a
// Sentinel URL (the Sentinels' and the master's) and of a Cluster seed
// list, each verifying the host it dials.
func TestRedisTLSOptionsTopologies(t *testing.T) {
	for _, tc := range []struct {
		url      string
		o        RedisTLSOptions
		sentinel bool
	}{
		{"rediss+sentinel://s1:26379,s2:26379/mymaster", RedisTLSOptions{}, true},
		{"redis+sentinel://s1:26379/mymaster", RedisTLSOptions{Enable: true}, true},
		{"rediss://n1:7000,n2:7001", RedisTLSOptions{SkipHostnameVerification: true}, false},
		{"n1:7000,n2:7001", RedisTLSOptions{Enable: true}, false},
	} {
		opt, err := parseRedisURL(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if err := applyRedisTLS(&opt, tc.url, tc.o, nil); err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if opt.TLSConfig == nil || opt.TLSConfig.ServerName != "" || opt.DialCtxFn == nil {
			t.Errorf("%s: TLSConfig %+v, DialCtxFn set %v: want TLS, verifying each dialled host", tc.url, opt.TLSConfig, opt.DialCtxFn != nil)
		}
		if tc.sentinel && (opt.Sentinel.TLSConfig == nil || opt.Sentinel.TLSConfig.ServerName != "") {
			t.Errorf("%s: the Sentinels' connections do not use TLS: %+v", tc.url, opt.Sentinel.TLSConfig)
		}
	}
}
