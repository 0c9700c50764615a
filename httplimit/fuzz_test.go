package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/floodgate-dev/floodgate/httplimit"
)

// FuzzClientIP feeds arbitrary peers and forwarding headers to ClientIP:
// it never panics, returns a valid, unmapped, zoneless address or an
// error, and never believes a header sent by an untrusted peer.
func FuzzClientIP(f *testing.F) {
	for _, s := range [][3]string{
		{"10.0.0.1:80", "198.51.100.1, 10.0.0.2", `for=192.0.2.60;proto=http;by=203.0.113.43`},
		{"[2001:db8::1]:443", "[2001:db8::7]:4711, ::ffff:1.2.3.4", `for="[2001:db8:cafe::17]:4711", For=unknown`},
		{"192.0.2.1", "garbage,,", `for="_gazonk";by="a,b;c=\"d\""`},
		{"@", "1.2.3.4:99999", `for="unterminated`},
		{"[fe80::1%eth0]:1", "fe80::1%25eth0", `for=[::1]:80 ; proto=https ,`},
	} {
		f.Add(s[0], s[1], s[2])
	}
	ipOpts := [][]httplimit.IPOption{
		nil,
		{httplimit.TrustedProxies("0.0.0.0/0", "::/0")},
		{httplimit.TrustedProxies("0.0.0.0/0", "::/0"), httplimit.ForwardedHeader("Forwarded")},
		{httplimit.TrustedProxies("10.0.0.0/8", "2001:db8::/32"), httplimit.ForwardedHeader("Forwarded")},
		{httplimit.TrustedProxies("10.0.0.0/8", "2001:db8::/32")},
	}
	f.Fuzz(func(t *testing.T, remote, xff, fwd string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		r.Header["X-Forwarded-For"] = []string{xff}
		r.Header["Forwarded"] = []string{fwd}
		peer, peerErr := httplimit.ClientIP(r) // nothing trusted: the peer
		for i, opts := range ipOpts {
			a, err := httplimit.ClientIP(r, opts...)
			if err != nil {
				continue
			}
			if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
				t.Fatalf("options %d: ClientIP returned %v", i, a)
			}
			if peerErr != nil {
				t.Fatalf("options %d: %v for an unparseable peer %q", i, a, remote)
			}
			if !trustedBy(i, peer) && a != peer {
				t.Fatalf("options %d: untrusted peer %v, yet client %v", i, peer, a)
			}
		}
		httplimit.ForwardedFor(fwd) // must not panic
	})
}

func trustedBy(opts int, a netip.Addr) bool {
	switch opts {
	case 1, 2:
		return true
	case 3, 4:
		return netip.MustParsePrefix("10.0.0.0/8").Contains(a) || netip.MustParsePrefix("2001:db8::/32").Contains(a)
	}
	return false
}
