// Package tlsfiles reads the server's TLS files — certificates, keys and
// CA bundles for its listeners and for Redis — with errors that name the
// file and what is wrong with it, and keeps them fresh: a Reloading value
// reads its files again when they change.
package tlsfiles

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

// Reloading holds a value loaded from files and reloads it when they
// change. It is safe for concurrent use.
type Reloading[T any] struct {
	what  string // "TLS certificate", for logs
	files []string
	load  func() (T, error)
	log   *slog.Logger

	mu  sync.Mutex
	sig string // of the files as last loaded or tried
	val T
}

// NewReloading loads the value with load, from files, a first time; an
// error then is the caller's. what names the value in logs ("TLS
// certificate"); log may be nil.
func NewReloading[T any](what string, log *slog.Logger, load func() (T, error), files ...string) (*Reloading[T], error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reloading[T]{what: what, files: files, load: load, log: log, sig: filesSig(files)}
	v, err := load()
	if err != nil {
		return nil, err
	}
	r.val = v
	return r, nil
}

// Get returns the value, Reloading it first if the files changed.
func (r *Reloading[T]) Get() T {
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

// ReadPEMFile reads a file for TLS; its errors name the file and what it
// was meant to hold.
func ReadPEMFile(what, file string) ([]byte, error) {
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

// LoadKeyPair reads a certificate (chain) and its private key, with errors
// that say which file is wrong and how: not found, not PEM, or a key that
// does not match the certificate.
func LoadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := ReadPEMFile("certificate file", certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := ReadPEMFile("key file", keyFile)
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

// LoadCAPool reads a file of PEM CA certificates into a pool, added to the
// system's roots when system is set.
func LoadCAPool(file string, system bool) (*x509.CertPool, error) {
	data, err := ReadPEMFile("CA file", file)
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
