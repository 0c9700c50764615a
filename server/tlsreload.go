package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/floodgate-dev/floodgate/server/internal/tlsfiles"
)

// serverTLS is the TLS of the listeners: a certificate, and with a client
// CA, mutual TLS; all read again when their files change.
type serverTLS struct {
	cert *tlsfiles.Reloading[*tls.Certificate]
	ca   *tlsfiles.Reloading[*x509.CertPool] // nil: no client certificates asked for
	san  string                              // "": any client certificate the CA signed
}

// listenerTLS returns the TLS configurations of the HTTP and gRPC listeners
// of c, both nil without TLS.
func listenerTLS(c Config) (httpConf, grpcConf *tls.Config, err error) {
	if c.TLSCertFile == "" {
		if c.TLSClientCAFile != "" || c.TLSClientSAN != "" {
			return nil, nil, errors.New("server: client certificate verification needs TLS: a certificate and a key file")
		}
		return nil, nil, nil
	}
	if c.TLSClientSAN != "" && c.TLSClientCAFile == "" {
		return nil, nil, errors.New("server: a client certificate SAN is given but no client CA file to verify client certificates with")
	}
	s := &serverTLS{san: c.TLSClientSAN}
	s.cert, err = tlsfiles.NewReloading("TLS certificate", c.Logger, func() (*tls.Certificate, error) {
		return tlsfiles.LoadKeyPair(c.TLSCertFile, c.TLSKeyFile)
	}, c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("server: TLS: %w", err)
	}
	if c.TLSClientCAFile != "" {
		s.ca, err = tlsfiles.NewReloading("TLS client CA", c.Logger, func() (*x509.CertPool, error) {
			return tlsfiles.LoadCAPool(c.TLSClientCAFile, false)
		}, c.TLSClientCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("server: TLS client CA: %w", err)
		}
	}
	// HTTP keeps to HTTP/1.1 (no ALPN), as before; gRPC needs h2.
	return s.config(), s.config("h2"), nil
}

// config returns a listener's configuration: each handshake gets the
// current certificate and client CA.
func (s *serverTLS) config(nextProtos ...string) *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: nextProtos}
	if s.san != "" {
		base.VerifyConnection = s.verifySAN
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := base.Clone()
			c.Certificates = []tls.Certificate{*s.cert.Get()}
			if s.ca != nil {
				c.ClientAuth = tls.RequireAndVerifyClientCert
				c.ClientCAs = s.ca.Get()
			}
			return c, nil
		},
	}
}

// verifySAN admits a client whose verified certificate carries s.san.
func (s *serverTLS) verifySAN(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("no client certificate")
	}
	leaf := cs.PeerCertificates[0]
	if certHasSAN(leaf, s.san) {
		return nil
	}
	return fmt.Errorf("client certificate %q does not carry the SAN %q", leaf.Subject.String(), s.san)
}

// certHasSAN reports whether c names san among its subject alternative
// names: a DNS name (wildcards as in host name verification), an IP
// address, a URI or an e-mail address.
func certHasSAN(c *x509.Certificate, san string) bool {
	if (len(c.DNSNames) > 0 || len(c.IPAddresses) > 0) && c.VerifyHostname(san) == nil {
		return true
	}
	for _, u := range c.URIs {
		if u.String() == san {
			return true
		}
	}
	for _, e := range c.EmailAddresses {
		if e == san {
			return true
		}
	}
	return false
}
