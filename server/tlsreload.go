package server

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
)

// Certificates and CAs are read from files again when the files change, so
// that a rotation (cert-manager, a Kubernetes secret, a cron job) needs no
// restart: every TLS handshake (a new client connection, a new connection
// to Redis) first looks at the files' size, modification time and inode
// (cheap next to a handshake) and reloads them when any of those changed. A
// reload that fails (a half-written file, a certificate written before its
// key) is logged and the previous certificate stays in use; it is tried
// again when the files change again.

// reloading holds a value loaded from files and reloads it when they change.
type reloading[T any] struct {
	what  string // "TLS certificate", for logs
	files []string
	load  func() (T, error)
	log   *slog.Logger

	mu  sync.Mutex
	sig string // of the files as last loaded or tried
	val T
}

// newReloading loads the value a first time; an error then is the caller's.
func newReloading[T any](what string, log *slog.Logger, load func() (T, error), files ...string) (*reloading[T], error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &reloading[T]{what: what, files: files, load: load, log: log, sig: filesSig(files)}
	v, err := load()
	if err != nil {
		return nil, err
	}
	r.val = v
	return r, nil
}

// get returns the value, reloading it first if the files changed.
func (r *reloading[T]) get() T {
	sig := filesSig(r.files)
	r.mu.Lock()
	defer r.mu.Unlock()
	if sig == r.sig {
		return r.val
	}
	r.sig = sig
	v, err := r.load()
	if err != nil {
		r.log.Error(r.what+" changed but cannot be loaded; the previous one stays in use", "err", err)
		return r.val
	}
	r.val = v
	r.log.Info(r.what+" reloaded", "files", strings.Join(r.files, ", "))
	return v
}

// filesSig identifies the current version of files: size, modification time
// and, where the system tells, inode and change time of each (a stat error stands for itself).
func filesSig(files []string) string {
	var b strings.Builder
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v;", f, err)
			continue
		}
		fmt.Fprintf(&b, "%d %d %s;", fi.Size(), fi.ModTime().UnixNano(), fileID(fi))
	}
	return b.String()
}

// readPEMFile reads a file for TLS; its errors name the file and what it
// was meant to hold.
func readPEMFile(what, file string) ([]byte, error) {
	data, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s %s: not found", what, file)
	case err != nil:
		return nil, fmt.Errorf("%s %s: %w", what, file, err)
	}
	return data, nil
}

// pemTypes returns the types of the PEM blocks in data.
func pemTypes(data []byte) []string {
	var types []string
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return types
		}
		types = append(types, b.Type)
	}
}

func hasPEM(types []string, match func(string) bool) bool {
	for _, t := range types {
		if match(t) {
			return true
		}
	}
	return false
}

func isCert(t string) bool { return t == "CERTIFICATE" }
func isKey(t string) bool  { return strings.HasSuffix(t, "PRIVATE KEY") }

// loadKeyPair reads a certificate (chain) and its private key, with errors
// that say which file is wrong and how: not found, not PEM, or a key that
// does not match the certificate.
func loadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := readPEMFile("certificate file", certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readPEMFile("key file", keyFile)
	if err != nil {
		return nil, err
	}
	ct, kt := pemTypes(certPEM), pemTypes(keyPEM)
	if !hasPEM(ct, isCert) {
		hint := ""
		if hasPEM(ct, isKey) {
			hint = " (it holds a private key: are the certificate and key files swapped?)"
		}
		return nil, fmt.Errorf("certificate file %s: no PEM certificate in it (want -----BEGIN CERTIFICATE-----)%s", certFile, hint)
	}
	if !hasPEM(kt, isKey) {
		hint := ""
		if hasPEM(kt, isCert) {
			hint = " (it holds a certificate: are the certificate and key files swapped?)"
		}
		return nil, fmt.Errorf("key file %s: no PEM private key in it (want -----BEGIN PRIVATE KEY-----)%s", keyFile, hint)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") || strings.Contains(err.Error(), "mismatched") {
			return nil, fmt.Errorf("key file %s does not match the certificate in %s", keyFile, certFile)
		}
		return nil, fmt.Errorf("certificate file %s with key file %s: %w", certFile, keyFile, err)
	}
	return &cert, nil
}

// loadCAPool reads a file of PEM CA certificates into a pool, added to the
// system's roots when system is set.
func loadCAPool(file string, system bool) (*x509.CertPool, error) {
	data, err := readPEMFile("CA file", file)
	if err != nil {
		return nil, err
	}
	var pool *x509.CertPool
	if system {
		pool, _ = x509.SystemCertPool()
	}
	if pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("CA file %s: no PEM certificate in it (want -----BEGIN CERTIFICATE-----)", file)
	}
	return pool, nil
}

// serverTLS is the TLS of the listeners: a certificate, and with a client
// CA, mutual TLS; all read again when their files change.
type serverTLS struct {
	cert *reloading[*tls.Certificate]
	ca   *reloading[*x509.CertPool] // nil: no client certificates asked for
	san  string                     // "": any client certificate the CA signed
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
	s.cert, err = newReloading("TLS certificate", c.Logger, func() (*tls.Certificate, error) {
		return loadKeyPair(c.TLSCertFile, c.TLSKeyFile)
	}, c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("server: TLS: %w", err)
	}
	if c.TLSClientCAFile != "" {
		s.ca, err = newReloading("TLS client CA", c.Logger, func() (*x509.CertPool, error) {
			return loadCAPool(c.TLSClientCAFile, false)
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
			c.Certificates = []tls.Certificate{*s.cert.get()}
			if s.ca != nil {
				c.ClientAuth = tls.RequireAndVerifyClientCert
				c.ClientCAs = s.ca.get()
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
