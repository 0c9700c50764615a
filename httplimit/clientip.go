package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// IPOption configures how KeyByIP and ClientIP find the client address.
type IPOption func(*ipConfig)

type ipConfig struct {
	trusted   []netip.Prefix
	v4bits    int
	v6bits    int
	header    string // canonical
	forwarded bool   // header is Forwarded (RFC 7239)
	err       error
}

func newIPConfig(opts []IPOption) (*ipConfig, error) {
	ic := &ipConfig{v4bits: 32, v6bits: 64, header: "X-Forwarded-For"}
	for _, o := range opts {
		if o != nil {
			o(ic)
		}
	}
	if ic.err != nil {
		return nil, ic.err
	}
	return ic, nil
}

func (ic *ipConfig) fail(format string, args ...any) {
	if ic.err == nil {
		ic.err = fmt.Errorf("httplimit: "+format, args...)
	}
}

// TrustedProxies lists the proxies whose forwarding header (see
// ForwardedHeader) is believed, as CIDR prefixes ("10.0.0.0/8",
// "2001:db8::/32") or single addresses ("192.0.2.7"). By default none is
// trusted and the client is the TCP peer, r.RemoteAddr. List every proxy
// between the clients and this server, and nothing a client can reach
// directly: an address in this list is never a client unless every hop
// before it is trusted too.
func TrustedProxies(cidrs ...string) IPOption {
	return func(ic *ipConfig) {
		for _, s := range cidrs {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				a, aerr := netip.ParseAddr(s)
				if aerr != nil || a.Zone() != "" {
					ic.fail("TrustedProxies: %q is not an IP address or CIDR prefix", s)
					return
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			p = p.Masked()
			if p.Addr().Is4In6() && p.Bits() >= 96 {
				// ::ffff:10.0.0.0/104 is 10.0.0.0/8: addresses are unmapped before
				// they are compared.
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			ic.trusted = append(ic.trusted, p)
		}
	}
}

// IPv6Prefix sets how many leading bits of an IPv6 address make its key
// (default 64): all addresses of one /64 share a limit, since a single
// subscriber usually holds one. It must be between 1 and 128; 128 keys every
// address on its own.
func IPv6Prefix(bits int) IPOption {
	return func(ic *ipConfig) {
		if bits < 1 || bits > 128 {
			ic.fail("IPv6Prefix must be between 1 and 128, got %d", bits)
			return
		}
		ic.v6bits = bits
	}
}

// IPv4Prefix sets how many leading bits of an IPv4 address make its key
// (default 32: every address on its own). It must be between 1 and 32.
func IPv4Prefix(bits int) IPOption {
	return func(ic *ipConfig) {
		if bits < 1 || bits > 32 {
			ic.fail("IPv4Prefix must be between 1 and 32, got %d", bits)
			return
		}
		ic.v4bits = bits
	}
}

// ForwardedHeader sets the request header that trusted proxies write the
// client address into (default "X-Forwarded-For"). "Forwarded" selects RFC
// 7239 syntax (for= parameters, quoted "[IPv6]:port" nodes); any other name
// is read as a comma-separated list of addresses like X-Forwarded-For.
//
// Only one header is read, because a proxy passes the headers it does not
// write on unchanged: if your proxies append to X-Forwarded-For, a client's
// own Forwarded header would name any address it likes.
func ForwardedHeader(name string) IPOption {
	return func(ic *ipConfig) {
		if !isToken(name) {
			ic.fail("ForwardedHeader: invalid header name %q", name)
			return
		}
		ic.header = http.CanonicalHeaderKey(name)
		ic.forwarded = ic.header == "Forwarded"
	}
}

// ClientIP returns the address of the client that sent r, as KeyByIP with
// the same options sees it before grouping. It is the TCP peer of
// r.RemoteAddr unless that peer is a trusted proxy (see TrustedProxies);
// then the forwarding header (see ForwardedHeader; all its lines, in order,
// as one list) is walked from the right, the end that the nearest proxy
// wrote, past every trusted address, and the first untrusted address is the
// client. When every address is trusted, the leftmost one is.
//
// The address is never IPv4-mapped IPv6 (::ffff:192.0.2.1 is 192.0.2.1) and
// carries no zone. ClientIP returns an error when r.RemoteAddr is not an IP
// address (a Unix socket listener), or when the walk reaches an entry that is
// not an address: malformed, "unknown", an obfuscated identifier, or a
// Forwarded element without for=. Entries left of the client are never
// looked at, so what a client prepends does not matter.
func ClientIP(r *http.Request, opts ...IPOption) (netip.Addr, error) {
	ic, err := newIPConfig(opts)
	if err != nil {
		return netip.Addr{}, err
	}
	return ic.clientIP(r)
}

func (ic *ipConfig) trusts(a netip.Addr) bool {
	for _, p := range ic.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (ic *ipConfig) clientIP(r *http.Request) (netip.Addr, error) {
	peer, err := parseRemoteAddr(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, err
	}
	if !ic.trusts(peer) {
		return peer, nil
	}
	client := peer
	lines := r.Header.Values(ic.header)
	for i := len(lines) - 1; i >= 0; i-- {
		var (
			a       netip.Addr
			stopped bool
			err     error
		)
		if ic.forwarded {
			a, stopped, err = ic.walkForwarded(lines[i])
		} else {
			a, stopped, err = ic.walkList(lines[i])
		}
		if err != nil {
			return netip.Addr{}, fmt.Errorf("httplimit: %s: %w", ic.header, err)
		}
		if a.IsValid() {
			client = a
		}
		if stopped {
			return client, nil
		}
	}
	return client, nil
}

// walkList walks one line of an X-Forwarded-For style list from the right.
// It returns the leftmost address it looked at (invalid when the line has
// none) and whether that address is the client (untrusted).
func (ic *ipConfig) walkList(line string) (last netip.Addr, client bool, err error) {
	for rest := line; ; {
		k := strings.LastIndexByte(rest, ',')
		hop := trimOWS(rest[k+1:])
		if hop != "" {
			a, err := parseNode(hop)
			if err != nil {
				return netip.Addr{}, false, err
			}
			last = a
			if !ic.trusts(a) {
				return a, true, nil
			}
		}
		if k < 0 {
			return last, false, nil
		}
		rest = rest[:k]
	}
}

// walkForwarded is walkList for a line of the Forwarded header.
func (ic *ipConfig) walkForwarded(line string) (last netip.Addr, client bool, err error) {
	fors, err := forwardedFor(line)
	if err != nil {
		return netip.Addr{}, false, err
	}
	for i := len(fors) - 1; i >= 0; i-- {
		if fors[i] == "" {
			return netip.Addr{}, false, fmt.Errorf("element %d has no for= parameter", i+1)
		}
		a, err := parseNode(fors[i])
		if err != nil {
			return netip.Addr{}, false, err
		}
		last = a
		if !ic.trusts(a) {
			return a, true, nil
		}
	}
	return last, false, nil
}

// parseRemoteAddr parses http.Request.RemoteAddr: "ip:port", "[ipv6]:port",
// or a bare address.
func parseRemoteAddr(s string) (netip.Addr, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), nil
	}
	return netip.Addr{}, fmt.Errorf("httplimit: RemoteAddr %q is not an IP address", s)
}

// parseNode parses one hop of a forwarding header: an IPv4 address, an IPv6
// address (bare or in brackets), either with an optional ":port" (the port
// may be an RFC 7239 obfuscated "_port"; it is not used).
func parseNode(s string) (netip.Addr, error) {
	var host string
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, fmt.Errorf("bad address %q: no closing bracket", s)
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" && !validPort(rest) {
			return netip.Addr{}, fmt.Errorf("bad address %q", s)
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return netip.Addr{}, fmt.Errorf("bad address %q: not IPv6 in brackets", s)
		}
		return a.Unmap().WithZone(""), nil
	case strings.Count(s, ":") == 1:
		k := strings.IndexByte(s, ':')
		host = s[:k]
		if !validPort(s[k:]) {
			return netip.Addr{}, fmt.Errorf("bad address %q", s)
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is4() {
			return netip.Addr{}, fmt.Errorf("bad address %q", s)
		}
		return a, nil
	}
	if s == "unknown" || strings.HasPrefix(s, "_") {
		return netip.Addr{}, fmt.Errorf("hop %q is unknown or obfuscated", s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("bad address %q", s)
	}
	return a.Unmap().WithZone(""), nil
}

// validPort reports whether s is ":" followed by a port number (at most
// 65535), or by an RFC 7239 obfuscated port ("_" and letters, digits, ".",
// "_", "-").
func validPort(s string) bool {
	if len(s) < 2 || s[0] != ':' {
		return false
	}
	p := s[1:]
	if p[0] == '_' {
		for i := 1; i < len(p); i++ {
			c := p[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return len(p) > 1
	}
	if len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
		n = n*10 + int(p[i]-'0')
	}
	return n <= 65535
}

func trimOWS(s string) string { return strings.Trim(s, " \t") }

func skipOWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

// forwardedFor parses one line of a Forwarded header (RFC 7239 section 4)
// and returns the value of each element's for= parameter, unquoted, in
// order; "" for an element without one. Empty elements are skipped.
// Whitespace is allowed around ",", ";" and "=", and unquoted values may
// hold any visible character but the delimiters (so that for=[::1]:80 from
// sloppy proxies is read too).
func forwardedFor(s string) ([]string, error) {
	var out []string
	i, n := 0, len(s)
	for {
		// One element: pairs separated by ";", up to "," or the end.
		var forVal string
		hasFor, hasPair := false, false
		for {
			i = skipOWS(s, i)
			if i < n && s[i] != ',' && s[i] != ';' {
				j := i
				for j < n && isTchar(s[j]) {
					j++
				}
				if j == i {
					return nil, fmt.Errorf("unexpected %q at offset %d", s[i], i)
				}
				name := s[i:j]
				i = skipOWS(s, j)
				if i >= n || s[i] != '=' {
					return nil, fmt.Errorf("parameter %q has no value", name)
				}
				i = skipOWS(s, i+1)
				var val string
				if i < n && s[i] == '"' {
					var err error
					if val, i, err = unquote(s, i); err != nil {
						return nil, err
					}
				} else {
					j := i
					for j < n && s[j] > ' ' && s[j] < 0x7f && s[j] != ',' && s[j] != ';' && s[j] != '"' {
						j++
					}
					val, i = s[i:j], j
				}
				if val == "" {
					return nil, fmt.Errorf("parameter %q has an empty value", name)
				}
				if strings.EqualFold(name, "for") {
					if hasFor {
						return nil, fmt.Errorf("element %d has two for= parameters", len(out)+1)
					}
					forVal, hasFor = val, true
				}
				hasPair = true
				i = skipOWS(s, i)
			}
			if i < n && s[i] == ';' {
				i++
				continue
			}
			if i < n && s[i] != ',' {
				return nil, fmt.Errorf("unexpected %q at offset %d", s[i], i)
			}
			break
		}
		if hasPair {
			out = append(out, forVal)
		}
		if i >= n {
			return out, nil
		}
		i++ // ","
	}
}

// unquote reads the quoted-string that starts at s[i] == '"' and returns its
// value and the offset after the closing quote.
func unquote(s string, i int) (string, int, error) {
	var b strings.Builder
	for j := i + 1; j < len(s); j++ {
		c := s[j]
		switch {
		case c == '"':
			return b.String(), j + 1, nil
		case c == '\\':
			if j+1 == len(s) {
				return "", 0, fmt.Errorf("unterminated quoted string at offset %d", i)
			}
			j++
			b.WriteByte(s[j])
		case c < ' ' && c != '\t' || c == 0x7f:
			return "", 0, fmt.Errorf("control character in quoted string at offset %d", j)
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, fmt.Errorf("unterminated quoted string at offset %d", i)
}

func isTchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
