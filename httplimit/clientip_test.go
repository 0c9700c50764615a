package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/httplimit"
)

func TestClientIP(t *testing.T) {
	trusted := httplimit.TrustedProxies("10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.254")
	fwd := httplimit.ForwardedHeader("forwarded")
	const proxy = "10.0.0.1:4000"
	for _, c := range []struct {
		remote string
		header []string // "Name: value" lines
		opts   []httplimit.IPOption
		exp    string // address, or "error: <substring>"
	}{
		// The TCP peer, unless it is trusted.
		{"192.0.2.1:1234", nil, nil, "192.0.2.1"},
		{"192.0.2.1", nil, nil, "192.0.2.1"},
		{"[2001:db8::1]:443", nil, nil, "2001:db8::1"},
		{"[::ffff:192.0.2.1]:443", nil, nil, "192.0.2.1"},
		{"[fe80::1%eth0]:443", nil, nil, "fe80::1"},
		{"@", nil, nil, `error: RemoteAddr "@" is not an IP address`},
		{"", nil, nil, `error: RemoteAddr "" is not an IP address`},
		{"192.0.2.1:1234", []string{"X-Forwarded-For: 198.51.100.1"}, nil, "192.0.2.1"},                           // no proxy trusted
		{"192.0.2.1:1234", []string{"X-Forwarded-For: 198.51.100.1"}, []httplimit.IPOption{trusted}, "192.0.2.1"}, // peer not trusted

		// X-Forwarded-For from a trusted proxy, walked from the right.
		{proxy, nil, []httplimit.IPOption{trusted}, "10.0.0.1"},
		{proxy, []string{"X-Forwarded-For: 198.51.100.1"}, []httplimit.IPOption{trusted}, "198.51.100.1"},
		{proxy, []string{"X-Forwarded-For: 6.6.6.6, 198.51.100.1, 10.0.0.2"}, []httplimit.IPOption{trusted}, "198.51.100.1"},
		{proxy, []string{"X-Forwarded-For: 6.6.6.6, 198.51.100.1, 192.0.2.254"}, []httplimit.IPOption{trusted}, "198.51.100.1"},
		{proxy, []string{"X-Forwarded-For: 10.0.0.3, 10.0.0.2"}, []httplimit.IPOption{trusted}, "10.0.0.3"},
		{proxy, []string{"X-Forwarded-For: 198.51.100.9", "X-Forwarded-For: 10.0.0.5"}, []httplimit.IPOption{trusted}, "198.51.100.9"},
		{proxy, []string{"X-Forwarded-For: 198.51.100.9", "X-Forwarded-For: 198.51.100.7"}, []httplimit.IPOption{trusted}, "198.51.100.7"},
		{proxy, []string{"X-Forwarded-For: garbage, 198.51.100.1"}, []httplimit.IPOption{trusted}, "198.51.100.1"},
		{proxy, []string{"X-Forwarded-For: 198.51.100.1,, ,"}, []httplimit.IPOption{trusted}, "198.51.100.1"},
		{proxy, []string{"X-Forwarded-For: "}, []httplimit.IPOption{trusted}, "10.0.0.1"},
		{proxy, []string{"X-Forwarded-For:  198.51.100.1:4711"}, []httplimit.IPOption{trusted}, "198.51.100.1"},
		{proxy, []string{"X-Forwarded-For: [2001:db8::7]:4711"}, []httplimit.IPOption{trusted}, "2001:db8::7"},
		{proxy, []string{"X-Forwarded-For: 2001:db8::7"}, []httplimit.IPOption{trusted}, "2001:db8::7"},
		{proxy, []string{"X-Forwarded-For: ::ffff:198.51.100.1"}, []httplimit.IPOption{trusted}, "198.51.100.1"},
		{proxy, []string{"X-Forwarded-For: 2001:db8::7, 2001:db8:ffff:1::1"}, []httplimit.IPOption{trusted}, "2001:db8::7"},
		{"[2001:db8:ffff::1]:80", []string{"X-Forwarded-For: 198.51.100.1"}, []httplimit.IPOption{trusted}, "198.51.100.1"},
		{"[::ffff:10.0.0.1]:80", []string{"X-Forwarded-For: 198.51.100.1"}, []httplimit.IPOption{trusted}, "198.51.100.1"},
		{proxy, []string{"X-Forwarded-For: 198.51.100.1, garbage"}, []httplimit.IPOption{trusted}, `error: X-Forwarded-For: bad address "garbage"`},
		{proxy, []string{"X-Forwarded-For: 198.51.100.1:99999"}, []httplimit.IPOption{trusted}, "error: bad address"},
		{proxy, []string{"X-Forwarded-For: unknown"}, []httplimit.IPOption{trusted}, "error: unknown or obfuscated"},
		// The default header is X-Forwarded-For: a Forwarded header is not read.
		{proxy, []string{"Forwarded: for=6.6.6.6", "X-Forwarded-For: 198.51.100.1"}, []httplimit.IPOption{trusted}, "198.51.100.1"},
		// Another list header.
		{proxy, []string{"X-Real-Ip: 198.51.100.1"}, []httplimit.IPOption{trusted, httplimit.ForwardedHeader("X-Real-IP")}, "198.51.100.1"},

		// RFC 7239 Forwarded.
		{"192.0.2.1:1", []string{"Forwarded: for=198.51.100.1"}, []httplimit.IPOption{trusted, fwd}, "192.0.2.1"},
		{proxy, []string{"X-Forwarded-For: 198.51.100.1"}, []httplimit.IPOption{trusted, fwd}, "10.0.0.1"},
		{proxy, []string{"Forwarded: for=192.0.2.60;proto=http;by=203.0.113.43"}, []httplimit.IPOption{trusted, fwd}, "192.0.2.60"},
		{proxy, []string{`Forwarded: For="[2001:db8:cafe::17]:4711"`}, []httplimit.IPOption{trusted, fwd}, "2001:db8:cafe::17"},
		{proxy, []string{`Forwarded: for="[2001:db8:cafe::17]"`}, []httplimit.IPOption{trusted, fwd}, "2001:db8:cafe::17"},
		{proxy, []string{`Forwarded: for="[2001:db8:cafe::17]:_abc"`}, []httplimit.IPOption{trusted, fwd}, "2001:db8:cafe::17"},
		{proxy, []string{`Forwarded: for=[2001:db8:cafe::17]:4711`}, []httplimit.IPOption{trusted, fwd}, "2001:db8:cafe::17"}, // unquoted, leniently
		{proxy, []string{`Forwarded: for="192.0.2.43:47011"`}, []httplimit.IPOption{trusted, fwd}, "192.0.2.43"},
		{proxy, []string{"Forwarded: for=192.0.2.43, for=198.51.100.17"}, []httplimit.IPOption{trusted, fwd}, "198.51.100.17"},
		{proxy, []string{`Forwarded: for=192.0.2.43, for="10.1.2.3:8080";proto=https`}, []httplimit.IPOption{trusted, fwd}, "192.0.2.43"},
		{proxy, []string{`Forwarded: for=192.0.2.43`, `Forwarded: for="[2001:db8:ffff::9]";by=x`}, []httplimit.IPOption{trusted, fwd}, "192.0.2.43"},
		{proxy, []string{`Forwarded: for="6.6.6.6";by="a,b;c=\"d\"", for=198.51.100.2`}, []httplimit.IPOption{trusted, fwd}, "198.51.100.2"},
		{proxy, []string{`Forwarded: for = 198.51.100.2 ; proto=https ,`}, []httplimit.IPOption{trusted, fwd}, "198.51.100.2"},
		{proxy, []string{`Forwarded: for="_gazonk"`}, []httplimit.IPOption{trusted, fwd}, `error: Forwarded: hop "_gazonk" is unknown or obfuscated`},
		{proxy, []string{`Forwarded: for=unknown`}, []httplimit.IPOption{trusted, fwd}, `error: hop "unknown" is unknown or obfuscated`},
		{proxy, []string{`Forwarded: proto=http`}, []httplimit.IPOption{trusted, fwd}, "error: Forwarded: element 1 has no for= parameter"},
		{proxy, []string{`Forwarded: for="198.51.100.2`}, []httplimit.IPOption{trusted, fwd}, "error: Forwarded: unterminated quoted string at offset 4"},
		{proxy, []string{`Forwarded: for=198.51.100.2;for=198.51.100.3`}, []httplimit.IPOption{trusted, fwd}, "error: Forwarded: element 1 has two for= parameters"},
		{proxy, []string{`Forwarded: for`}, []httplimit.IPOption{trusted, fwd}, `error: Forwarded: parameter "for" has no value`},
		{proxy, []string{`Forwarded: for=`}, []httplimit.IPOption{trusted, fwd}, `error: Forwarded: parameter "for" has an empty value`},
		{proxy, []string{`Forwarded: for=198.51.100.2 x`}, []httplimit.IPOption{trusted, fwd}, `error: Forwarded: unexpected 'x' at offset 17`},
		{proxy, []string{`Forwarded: for="[198.51.100.2]"`}, []httplimit.IPOption{trusted, fwd}, `error: not IPv6 in brackets`},
		{proxy, []string{`Forwarded: for="[2001:db8::1"`}, []httplimit.IPOption{trusted, fwd}, `error: no closing bracket`},
		// A malformed line left of the client is never parsed.
		{proxy, []string{`Forwarded: for="broken`, `Forwarded: for=198.51.100.2`}, []httplimit.IPOption{trusted, fwd}, "198.51.100.2"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = c.remote
		for _, line := range c.header {
			name, value, _ := strings.Cut(line, ":")
			r.Header.Add(name, strings.TrimPrefix(value, " "))
		}
		a, err := httplimit.ClientIP(r, c.opts...)
		got := a.String()
		if err != nil {
			got = "error: " + err.Error()
		}
		if want, isErr := strings.CutPrefix(c.exp, "error: "); isErr && (err == nil || !strings.Contains(err.Error(), want)) || !isErr && got != c.exp {
			t.Errorf("%s %q: exp %s, got %s", c.remote, c.header, c.exp, got)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if _, err := httplimit.ClientIP(r, httplimit.IPv6Prefix(129)); err == nil || err.Error() != "httplimit: IPv6Prefix must be between 1 and 128, got 129" {
		t.Errorf("bad option: %v", err)
	}
}
