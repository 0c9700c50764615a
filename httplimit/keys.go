package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
)

// ErrNoKey is wrapped by the errors of requests the middleware cannot find a
// key for: the key is empty (KeyByHeader: the header is missing or empty),
// or the key function failed. Such requests get 400 Bad Request, or are
// served unlimited with PassWithoutKey. A long key is a key: see Keys in the
// package doc.
var ErrNoKey = errors.New("httplimit: no key for the request")

// KeyByIP keys requests by client IP address (the default key), as ClientIP
// finds it with opts. IPv4 addresses are keys as they are ("192.0.2.1");
// IPv6 addresses are grouped by their /64 prefix ("2001:db8:1:2::/64"),
// since one subscriber usually holds a whole /64. IPv4Prefix and IPv6Prefix
// change the grouping.
func KeyByIP(opts ...IPOption) Option {
	return func(c *config) {
		k, err := ipKey(opts)
		if err != nil {
			if c.err == nil {
				c.err = err
			}
			return
		}
		c.key = k
	}
}

func ipKey(opts []IPOption) (func(*http.Request) (string, error), error) {
	ic, err := newIPConfig(opts)
	if err != nil {
		return nil, err
	}
	return func(r *http.Request) (string, error) {
		a, err := ic.clientIP(r)
		if err != nil {
			return "", err
		}
		return ic.group(a), nil
	}, nil
}

// group returns the key of address a, which must be valid and unmapped.
func (ic *ipConfig) group(a netip.Addr) string {
	bits := ic.v6bits
	if a.Is4() {
		bits = ic.v4bits
	}
	if bits == a.BitLen() {
		return a.String()
	}
	p, _ := a.Prefix(bits) // bits is within [1, BitLen] by construction
	return p.String()
}

// KeyByHeader keys requests by the value of the request header name (the
// first one when there are several), e.g. an API key or a user ID that an
// authenticating proxy set. A request without it has no key (see
// PassWithoutKey). Only use a header that clients cannot forge, or one that
// names the client's own quota.
func KeyByHeader(name string) Option {
	return func(c *config) {
		if !isToken(name) {
			c.fail("KeyByHeader: invalid header name %q", name)
			return
		}
		name = http.CanonicalHeaderKey(name)
		c.key = func(r *http.Request) (string, error) { return r.Header.Get(name), nil }
	}
}

// KeyFunc keys requests by what f returns, e.g. the user of an authenticated
// session. An empty key, or an error, means the request has no key (see
// PassWithoutKey); the error goes to OnError wrapped with ErrNoKey. f must be
// safe for concurrent use.
func KeyFunc(f func(r *http.Request) (string, error)) Option {
	return func(c *config) {
		if f == nil {
			c.fail("KeyFunc function is nil")
			return
		}
		c.key = f
	}
}

// isToken reports whether s is a non-empty RFC 9110 token, the syntax of a
// header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return true
}

// keyError returns the error for a request whose key is missing (empty), or
// nil. A key of any other length is limited: the limiter counts one longer
// than backend.MaxKeyLen under its digest.
func keyError(key string) error {
	if key == "" {
		return fmt.Errorf("%w: key is empty", ErrNoKey)
	}
	return nil
}
