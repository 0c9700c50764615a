package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/server/internal/tlsfiles"
	"github.com/floodgate-dev/floodgate/server/storeurl"
)

// newCA makes a test CA in dir, failing the test on error.
func newCA(t *testing.T, dir, name string) *testenv.CA {
	t.Helper()
	ca, err := testenv.NewCA(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// issue writes a certificate from ca to name.crt and name.key.
func issue(t *testing.T, ca *testenv.CA, name string, o testenv.CertOptions) testenv.KeyPair {
	t.Helper()
	kp, err := ca.Issue(name, o)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// replaceFile gives path new content the way a rotation does: written
// aside, then renamed over it.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// rotate replaces the key pair at dst with a new certificate from ca, key
// first (so that for a moment the files do not match).
func rotate(t *testing.T, ca *testenv.CA, dst testenv.KeyPair, name string, o testenv.CertOptions) *x509.Certificate {
	t.Helper()
	certPEM, keyPEM, err := ca.IssuePEM(name, o)
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, dst.KeyFile, keyPEM)
	replaceFile(t, dst.CertFile, certPEM)
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestTLSFileErrors: every way a certificate, key or CA file can be wrong
// gives an error that names the file and the problem.
func TestTLSFileErrors(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "ca")
	a := issue(t, ca, "a", testenv.Localhost())
	b := issue(t, ca, "b", testenv.Localhost())
	notPEM := filepath.Join(dir, "notpem")
	if err := os.WriteFile(notPEM, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name        string
		cert, key   string
		want, want2 string
	}{
		{"cert missing", missing, a.KeyFile, "certificate file " + missing + ": not found", ""},
		{"key missing", a.CertFile, missing, "key file " + missing + ": not found", ""},
		{"cert not PEM", notPEM, a.KeyFile, "certificate file " + notPEM + ": no PEM certificate", ""},
		{"key not PEM", a.CertFile, notPEM, "key file " + notPEM + ": no PEM private key", ""},
		{"swapped", a.KeyFile, a.CertFile, "certificate file " + a.KeyFile, "swapped"},
		{"mismatch", a.CertFile, b.KeyFile, "key file " + b.KeyFile + " does not match the certificate in " + a.CertFile, ""},
	} {
		_, err := tlsfiles.LoadKeyPair(tc.cert, tc.key)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.want2) {
			t.Errorf("%s: %v, want %q %q", tc.name, err, tc.want, tc.want2)
		}
	}
	if _, err := tlsfiles.LoadCAPool(notPEM, false); err == nil || !strings.Contains(err.Error(), "CA file "+notPEM+": no PEM certificate") {
		t.Errorf("CA not PEM: %v", err)
	}
	if _, err := tlsfiles.LoadCAPool(a.KeyFile, false); err == nil || !strings.Contains(err.Error(), "CA file "+a.KeyFile) {
		t.Errorf("CA a key: %v", err)
	}

	cfg := filepath.Join(dir, "api.yaml")
	writeConfig(t, cfg, testYAML)
	for _, tc := range []struct {
		name string
		c    Config
		want string
	}{
		{"client CA without TLS", Config{TLSClientCAFile: ca.CertFile}, "needs TLS"},
		{"SAN without client CA", Config{TLSCertFile: a.CertFile, TLSKeyFile: a.KeyFile, TLSClientSAN: "x"}, "no client CA"},
		{"client CA missing", Config{TLSCertFile: a.CertFile, TLSKeyFile: a.KeyFile, TLSClientCAFile: missing}, "CA file " + missing + ": not found"},
		{"server key mismatch", Config{TLSCertFile: a.CertFile, TLSKeyFile: b.KeyFile}, "does not match"},
	} {
		tc.c.ConfigPath, tc.c.HTTPAddr, tc.c.GRPCAddr = cfg, "127.0.0.1:0", "127.0.0.1:0"
		tc.c.Backend = backend.NewMemory()
		srv, err := New(tc.c)
		if err == nil {
			srv.closeListeners()
			t.Errorf("%s: New succeeded", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}

	for _, tc := range []struct {
		name string
		url  string
		o    storeurl.RedisTLSOptions
		want string
	}{
		{"no Redis URL", "", storeurl.RedisTLSOptions{CAFile: ca.CertFile}, "no Redis URL"},
		{"files with redis://", "redis://127.0.0.1:1", storeurl.RedisTLSOptions{CAFile: ca.CertFile}, "does not use TLS: write rediss://"},
		{"files with unix", "unix:///tmp/x.sock", storeurl.RedisTLSOptions{Enable: true}, "does not use TLS"},
		{"CA missing", "rediss://127.0.0.1:1", storeurl.RedisTLSOptions{CAFile: missing}, "CA file " + missing + ": not found"},
		{"cert without key", "rediss://127.0.0.1:1", storeurl.RedisTLSOptions{CertFile: a.CertFile}, "both a certificate and a key"},
		{"client key mismatch", "rediss://127.0.0.1:1", storeurl.RedisTLSOptions{CertFile: a.CertFile, KeyFile: b.KeyFile}, "key file " + b.KeyFile + " does not match"},
	} {
		_, _, err := storeurl.Open(tc.url, "p", 300*time.Millisecond, storeurl.RedisTLS(tc.o))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// tlsOpts give the store calls of the TLS tests time for handshakes and
// script loads on a loaded machine.
var tlsOpts = Options{Timeout: 5 * time.Second}

// TestRedisTLSStore: floodgate's store opens a TLS-only redis-server that
// requires client certificates, with a CA file and a client certificate,
// and decides; a wrong CA, a missing client certificate, a host name the
// certificate lacks each fail with an error that says so.
func TestRedisTLSStore(t *testing.T) {
	r := testenv.NewRedis(t, testenv.WithTLS(nil, true))
	dir := t.TempDir()
	client := issue(t, r.TLS.CA, "floodgate", testenv.CertOptions{Client: true})
	url := "rediss://" + r.Addr
	good := storeurl.RedisTLSOptions{CAFile: r.TLS.CA.CertFile, CertFile: client.CertFile, KeyFile: client.KeyFile}

	b, c, err := storeurl.Open(url, backendtest.UniquePrefix(), 2*time.Second, storeurl.RedisTLS(good))
	if err != nil {
		t.Fatalf("OpenStore over TLS with a client certificate: %v", err)
	}
	s := newService(t, b, tlsOpts)
	if got := decide(t, s, desc(1, "user", "tls")); got.Failed || got.Code != CodeOK {
		t.Fatalf("decision over TLS: %+v", got)
	}
	c.Close()

	// REDIS_TLS=true with a host:port URL, as envoyproxy/ratelimit takes it.
	enabled := good
	enabled.Enable = true
	b, c, err = storeurl.Open(r.Addr, backendtest.UniquePrefix(), 2*time.Second, storeurl.RedisTLS(enabled))
	if err != nil {
		t.Fatalf("OpenStore host:port with Enable: %v", err)
	}
	if got := decide(t, newService(t, b, tlsOpts), desc(1, "user", "tls")); got.Failed {
		t.Fatalf("decision with Enable: %+v", got)
	}
	c.Close()

	otherCA := newCA(t, dir, "other-ca")
	wrongCA := good
	wrongCA.CAFile = otherCA.CertFile
	noCert := good
	noCert.CertFile, noCert.KeyFile = "", ""
	for _, tc := range []struct {
		name string
		url  string
		o    storeurl.RedisTLSOptions
		want []string
	}{
		{"wrong CA", url, wrongCA, []string{"unknown authority", "signed by no CA in " + otherCA.CertFile}},
		{"no client certificate", url, noCert, []string{"require a client certificate"}},
		{"plain URL to a TLS server", "redis://" + r.Addr + "?dial_timeout=500ms", storeurl.RedisTLSOptions{}, []string{"--redis redis://", "write rediss://"}},
	} {
		_, _, err := storeurl.Open(tc.url, backendtest.UniquePrefix(), time.Second, storeurl.RedisTLS(tc.o))
		if err == nil {
			t.Errorf("%s: OpenStore succeeded", tc.name)
			continue
		}
		t.Logf("%s: %v", tc.name, err)
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want %q", tc.name, err, w)
			}
		}
	}

	// A server certificate that names neither 127.0.0.1 nor localhost:
	// refused unless the host name is not verified; the chain still is.
	named := issue(t, r.TLS.CA, "redis-internal", testenv.CertOptions{DNSNames: []string{"redis.internal"}, Server: true})
	if _, err := r.Do(t.Context(), "CONFIG", "SET", "tls-cert-file", named.CertFile, "tls-key-file", named.KeyFile); err != nil {
		t.Fatal(err)
	}
	_, _, err = storeurl.Open(url, backendtest.UniquePrefix(), time.Second, storeurl.RedisTLS(good))
	if err == nil || !strings.Contains(err.Error(), "does not name the host") {
		t.Fatalf("a certificate for another host: %v, want a host name error", err)
	}
	skip := good
	skip.SkipHostnameVerification = true
	b, c, err = storeurl.Open(url, backendtest.UniquePrefix(), 2*time.Second, storeurl.RedisTLS(skip))
	if err != nil {
		t.Fatalf("host name not verified: %v", err)
	}
	if got := decide(t, newService(t, b, tlsOpts), desc(1, "user", "tls")); got.Failed {
		t.Fatalf("decision without host name verification: %+v", got)
	}
	c.Close()
	skip.CAFile = otherCA.CertFile
	if _, _, err = storeurl.Open(url, backendtest.UniquePrefix(), time.Second, storeurl.RedisTLS(skip)); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("host name not verified, wrong CA: %v, want the chain refused", err)
	}
}

// TestRedisTLSClientCertRotation: the client certificate's files are
// replaced while the store is open; Redis stops trusting the old one's CA;
// the next connection presents the new certificate, without a restart.
func TestRedisTLSClientCertRotation(t *testing.T) {
	r := testenv.NewRedis(t, testenv.WithTLS(nil, true))
	dir := t.TempDir()
	caA, caB := newCA(t, dir, "client-ca-a"), newCA(t, dir, "client-ca-b")
	// The server trusts the harness's CA (for Do) and one client CA.
	trust := func(ca *testenv.CA) {
		t.Helper()
		bundle := filepath.Join(dir, "trusted-"+ca.Name+".pem")
		if err := os.WriteFile(bundle, append(readFile(t, r.TLS.CA.CertFile), ca.CertPEM...), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Do(t.Context(), "CONFIG", "SET", "tls-ca-cert-file", bundle); err != nil {
			t.Fatal(err)
		}
	}
	trust(caA)
	client := issue(t, caA, "floodgate", testenv.CertOptions{Client: true})
	b, c, err := storeurl.Open("rediss://"+r.Addr, backendtest.UniquePrefix(), time.Second,
		storeurl.RedisTLS(storeurl.RedisTLSOptions{CAFile: r.TLS.CA.CertFile, CertFile: client.CertFile, KeyFile: client.KeyFile}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := newService(t, b, Options{Timeout: 5 * time.Second, Breaker: BreakerOptions{Failures: -1}})
	if got := decide(t, s, desc(1, "user", "rot")); got.Failed {
		t.Fatalf("before the rotation: %+v", got)
	}
	// newConns closes the store's connections: the next command dials.
	newConns := func() {
		t.Helper()
		if _, err := r.Do(t.Context(), "CLIENT", "KILL", "TYPE", "normal"); err != nil {
			t.Fatal(err)
		}
	}
	// eventually reports whether a decision succeeds within a few tries.
	eventually := func() bool {
		for range 20 {
			if got := decide(t, s, desc(1, "user", "rot")); !got.Failed {
				return true
			}
			time.Sleep(100 * time.Millisecond)
		}
		return false
	}

	trust(caB)
	newConns()
	if eventually() {
		t.Fatal("a new connection with the old certificate (CA a) was accepted after the server stopped trusting CA a")
	}
	rotate(t, caB, client, "floodgate-b", testenv.CertOptions{Client: true})
	newConns()
	if !eventually() {
		t.Fatalf("after the client certificate's files were replaced (CA b), decisions still fail%s", r.LogTail())
	}
}

// mtlsServer starts a server with TLS on both listeners, verifying client
// certificates against clientCA (and san, if any).
type mtlsServer struct {
	srv                *Server
	serverCA, clientCA *testenv.CA
	serverCert         testenv.KeyPair
	clientCAFile       string
}

func startMTLS(t *testing.T, san string) *mtlsServer {
	t.Helper()
	dir := t.TempDir()
	m := &mtlsServer{serverCA: newCA(t, dir, "server-ca"), clientCA: newCA(t, dir, "client-ca")}
	m.serverCert = issue(t, m.serverCA, "server", testenv.Localhost())
	// The client CA file is a copy, so that the test can rotate it.
	m.clientCAFile = filepath.Join(dir, "client-ca-file.pem")
	replaceFile(t, m.clientCAFile, m.clientCA.CertPEM)
	cfg := filepath.Join(dir, "api.yaml")
	writeConfig(t, cfg, testYAML)
	m.srv = startServer(t, Config{ConfigPath: cfg, TLSCertFile: m.serverCert.CertFile, TLSKeyFile: m.serverCert.KeyFile,
		TLSClientCAFile: m.clientCAFile, TLSClientSAN: san})
	return m
}

// clientConf trusts the server's CA and presents kp (none when empty).
func (m *mtlsServer) clientConf(t *testing.T, kp testenv.KeyPair) *tls.Config {
	t.Helper()
	conf := &tls.Config{RootCAs: m.serverCA.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if kp.CertFile != "" {
		cert, err := kp.Load()
		if err != nil {
			t.Fatal(err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf
}

// call makes one ShouldRateLimit call over a new connection.
func (m *mtlsServer) call(t *testing.T, kp testenv.KeyPair) error {
	t.Helper()
	conn, err := grpc.NewClient(m.srv.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(m.clientConf(t, kp))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = rls.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: "mtls"}}},
	}})
	return err
}

// serverSerial returns the serial number of the certificate the gRPC
// listener presents in a new handshake.
func (m *mtlsServer) serverSerial(t *testing.T, kp testenv.KeyPair) *big.Int {
	t.Helper()
	conf := m.clientConf(t, kp)
	conf.NextProtos = []string{"h2"}
	c, err := tls.Dial("tcp", m.srv.GRPCAddr(), conf)
	if err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// TestGRPCMutualTLS: with a client CA, a client without a certificate, or
// with one from another CA, is refused on gRPC and HTTP; one from the CA is
// served.
func TestGRPCMutualTLS(t *testing.T) {
	m := startMTLS(t, "")
	good := issue(t, m.clientCA, "envoy", testenv.CertOptions{Client: true})
	stranger := issue(t, newCA(t, t.TempDir(), "stranger-ca"), "stranger", testenv.CertOptions{Client: true})
	if err := m.call(t, good); err != nil {
		t.Fatalf("a client certificate from the CA: %v", err)
	}
	if err := m.call(t, testenv.KeyPair{}); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if err := m.call(t, stranger); err == nil {
		t.Fatal("a client certificate from another CA was accepted")
	}

	get := func(kp testenv.KeyPair) error {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: m.clientConf(t, kp)}}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get("https://" + m.srv.HTTPAddr() + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if err := get(good); err != nil {
		t.Fatalf("HTTPS with a client certificate: %v", err)
	}
	if err := get(testenv.KeyPair{}); err == nil {
		t.Fatal("HTTPS without a client certificate was served")
	}
}

// TestGRPCMutualTLSSAN: with a SAN required, only client certificates
// carrying it are served (DNS name or URI).
func TestGRPCMutualTLSSAN(t *testing.T) {
	for _, tc := range []struct {
		san   string
		right testenv.CertOptions
	}{
		{"envoy.mesh.local", testenv.CertOptions{DNSNames: []string{"a.example", "envoy.mesh.local"}}},
		{"spiffe://mesh/ns/edge/sa/envoy", testenv.CertOptions{URIs: []string{"spiffe://mesh/ns/edge/sa/envoy"}}},
	} {
		t.Run(tc.san, func(t *testing.T) {
			m := startMTLS(t, tc.san)
			tc.right.Client = true
			right := issue(t, m.clientCA, "right", tc.right)
			wrong := issue(t, m.clientCA, "wrong", testenv.CertOptions{Client: true, DNSNames: []string{"other.mesh.local"}, URIs: []string{"spiffe://mesh/ns/edge/sa/other"}})
			if err := m.call(t, right); err != nil {
				t.Fatalf("a client certificate with SAN %s: %v", tc.san, err)
			}
			if err := m.call(t, wrong); err == nil {
				t.Fatalf("a client certificate without SAN %s was accepted", tc.san)
			}
		})
	}
}

// TestServerTLSReload: the server certificate and the client CA are
// replaced on disk; the next handshake uses them, without a restart; a
// broken replacement leaves the previous certificate in use.
func TestServerTLSReload(t *testing.T) {
	m := startMTLS(t, "")
	client := issue(t, m.clientCA, "envoy", testenv.CertOptions{Client: true})
	before := m.serverSerial(t, client)
	if before.Cmp(readSerial(t, m.serverCert.CertFile)) != 0 {
		t.Fatal("the server does not present its certificate file's certificate")
	}

	rotated := rotate(t, m.serverCA, m.serverCert, "server-2", testenv.Localhost())
	if got := m.serverSerial(t, client); got.Cmp(rotated.SerialNumber) != 0 {
		t.Fatalf("after the rotation the server presents serial %v, want the new certificate's %v (old %v)", got, rotated.SerialNumber, before)
	}
	if err := m.call(t, client); err != nil {
		t.Fatalf("a call after the server certificate's rotation: %v", err)
	}

	// A half-written certificate: the previous one stays in use.
	replaceFile(t, m.serverCert.CertFile, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n"))
	if got := m.serverSerial(t, client); got.Cmp(rotated.SerialNumber) != 0 {
		t.Fatalf("with a broken certificate file the server presents serial %v, want the previous %v", got, rotated.SerialNumber)
	}
	again := rotate(t, m.serverCA, m.serverCert, "server-3", testenv.Localhost())
	if got := m.serverSerial(t, client); got.Cmp(again.SerialNumber) != 0 {
		t.Fatalf("after the files were fixed the server presents serial %v, want %v", got, again.SerialNumber)
	}

	// The client CA is rotated: the old CA's certificates are refused, the
	// new one's accepted.
	newCA := newCA(t, t.TempDir(), "client-ca-2")
	replaceFile(t, m.clientCAFile, newCA.CertPEM)
	if err := m.call(t, client); err == nil {
		t.Fatal("after the client CA's rotation a certificate from the old CA was accepted")
	}
	if err := m.call(t, issue(t, newCA, "envoy-2", testenv.CertOptions{Client: true})); err != nil {
		t.Fatalf("after the client CA's rotation, a certificate from the new CA: %v", err)
	}
}

func readSerial(t *testing.T, certFile string) *big.Int {
	t.Helper()
	pool, err := tls.X509KeyPair(readFile(t, certFile), readFile(t, strings.TrimSuffix(certFile, ".crt")+".key"))
	if err != nil {
		t.Fatal(err)
	}
	return pool.Leaf.SerialNumber
}
