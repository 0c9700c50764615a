package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority for TLS tests, made with crypto/x509 (no
// openssl needed): an ECDSA P-256 key and a self-signed certificate, written
// as PEM to CertFile. It issues server and client certificates with Issue.
type CA struct {
	// Name is the CA's common name.
	Name string
	// CertFile is the CA certificate, PEM, in the CA's directory.
	CertFile string
	// CertPEM is the content of CertFile.
	CertPEM []byte

	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// KeyPair names the PEM files of an issued certificate and its key.
type KeyPair struct {
	CertFile, KeyFile string
}

// CertOptions describe a certificate for CA.Issue.
type CertOptions struct {
	// CommonName is the subject's common name; "" uses the name given to
	// Issue.
	CommonName string
	// Subject alternative names.
	DNSNames []string
	IPs      []net.IP
	URIs     []string
	Emails   []string
	// Server and Client choose the extended key usages; neither means
	// both.
	Server, Client bool
	// NotAfter is the end of validity; zero means 24 hours from now.
	NotAfter time.Time
}

// NewCA makes a new CA whose certificate is written to dir/name.crt (the
// key stays in memory).
func NewCA(dir, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testenv: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"floodgate testenv"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(48 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("testenv: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("testenv: CA certificate: %w", err)
	}
	ca := &CA{Name: name, dir: dir, cert: cert, key: key,
		CertFile: filepath.Join(dir, name+".crt"),
		CertPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	if err := os.WriteFile(ca.CertFile, ca.CertPEM, 0o600); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	return ca, nil
}

// Pool returns a certificate pool holding only the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// IssuePEM returns a new certificate signed by the CA and its private key
// (PKCS #8), both PEM.
func (ca *CA) IssuePEM(name string, o CertOptions) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("testenv: key: %w", err)
	}
	cn := o.CommonName
	if cn == "" {
		cn = name
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial(),
		Subject:        pkix.Name{CommonName: cn},
		NotBefore:      time.Now().Add(-time.Hour),
		NotAfter:       o.NotAfter,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		DNSNames:       o.DNSNames,
		IPAddresses:    o.IPs,
		EmailAddresses: o.Emails,
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	}
	for _, s := range o.URIs {
		u, err := url.Parse(s)
		if err != nil {
			return nil, nil, fmt.Errorf("testenv: URI SAN %q: %w", s, err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	if o.Server || !o.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if o.Client || !o.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("testenv: certificate %s: %w", name, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("testenv: key %s: %w", name, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// Issue writes a new certificate signed by the CA to name.crt and its key
// to name.key in the CA's directory.
func (ca *CA) Issue(name string, o CertOptions) (KeyPair, error) {
	certPEM, keyPEM, err := ca.IssuePEM(name, o)
	if err != nil {
		return KeyPair{}, err
	}
	kp := KeyPair{CertFile: filepath.Join(ca.dir, name+".crt"), KeyFile: filepath.Join(ca.dir, name+".key")}
	if err := os.WriteFile(kp.CertFile, certPEM, 0o600); err != nil {
		return KeyPair{}, fmt.Errorf("testenv: %w", err)
	}
	if err := os.WriteFile(kp.KeyFile, keyPEM, 0o600); err != nil {
		return KeyPair{}, fmt.Errorf("testenv: %w", err)
	}
	return kp, nil
}

// Load reads the key pair for a tls.Config.
func (kp KeyPair) Load() (tls.Certificate, error) {
	return tls.LoadX509KeyPair(kp.CertFile, kp.KeyFile)
}

// Localhost are the options of a certificate for a server on 127.0.0.1,
// also valid as a client certificate.
func Localhost() CertOptions {
	return CertOptions{DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err)
	}
	return n
}
