package server

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-dev/floodgate/server/internal/connlimit"
)

// Tests of connection shedding (issue 12, "Connections are never shed"):
// the deadlines on HTTP requests and gRPC handshakes, the dashboard's stream
// that outlives them, and the cap on open connections. Every one runs a real
// Server on loopback sockets.

// shedServer starts a Server of testYAML with c's shedding settings.
func shedServer(t *testing.T, c Config) *Server {
	t.Helper()
	dir := t.TempDir()
	writeConfig(t, filepath.Join(dir, "api.yaml"), testYAML)
	c.ConfigPath = dir
	return startServer(t, c)
}

// dialRaw opens a TCP connection, closed by t.Cleanup.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// withheldPOST sends the header of a POST whose 1000-byte body never comes.
func withheldPOST(t *testing.T, c net.Conn, path string) {
	t.Helper()
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
}

// readUntilClosed reads c until the server closes it and returns what it
// read; it fails the test when c is still open after within.
func readUntilClosed(t *testing.T, c net.Conn, within time.Duration) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	var b strings.Builder
	_, err := io.Copy(&b, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the connection is still open after %v; read %q", c.LocalAddr(), within, b.String())
	}
	return b.String() // EOF (nil) or a reset: closed
}

// stillOpen reports whether the server has neither closed c nor written to
// it within d.
func stillOpen(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestHTTPWithheldBodyClosed reproduces issue 12: a POST whose body never
// arrives was never timed out. It is now closed at the read deadline.
func TestHTTPWithheldBodyClosed(t *testing.T) {
	srv := shedServer(t, Config{HTTPReadTimeout: 300 * time.Millisecond})
	c := dialRaw(t, srv.HTTPAddr())
	withheldPOST(t, c, "/v1/check")
	start := time.Now()
	got := readUntilClosed(t, c, 5*time.Second)
	t.Logf("closed after %v (read deadline 300ms)", time.Since(start).Round(time.Millisecond))
	// 408, saying what happened without the connection's addresses.
	if !strings.HasPrefix(got, "HTTP/1.1 408 ") || !strings.Contains(got, "did not arrive within the read timeout") || strings.Contains(got, "127.0.0.1") {
		t.Fatalf("answer %q, want a 408 naming the read timeout and no address", got)
	}

	// A connection that sends nothing at all is closed too.
	idle := dialRaw(t, srv.HTTPAddr())
	readUntilClosed(t, idle, 5*time.Second)
}

// TestHTTPUnauthorizedWithheldBody: with a token set, a request without it
// is answered 401 at once, without waiting for its body, and its connection
// closed (its next bytes would be that body); the read deadline is far off.
// A request that sends its body keeps its connection alive.
func TestHTTPUnauthorizedWithheldBody(t *testing.T) {
	srv := shedServer(t, Config{Token: "tok", HTTPReadTimeout: time.Minute})
	c := dialRaw(t, srv.HTTPAddr())
	withheldPOST(t, c, "/v1/check")
	got := readUntilClosed(t, c, 5*time.Second)
	if !strings.HasPrefix(got, "HTTP/1.1 401 ") || !strings.Contains(got, "Connection: close") {
		t.Fatalf("answer %q, want a 401 with Connection: close", got)
	}

	// An unknown path with a withheld body: 404 at once.
	c = dialRaw(t, srv.HTTPAddr())
	withheldPOST(t, c, "/nowhere")
	if got := readUntilClosed(t, c, 5*time.Second); !strings.HasPrefix(got, "HTTP/1.1 404 ") {
		t.Fatalf("answer %q, want a 404", got)
	}

	// Two authorized requests with bodies on one connection.
	c = dialRaw(t, srv.HTTPAddr())
	br := bufio.NewReader(c)
	body := `{"domain":"api","descriptors":[{"user":"keepalive"}]}`
	for i := range 2 {
		fmt.Fprintf(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("request %d: %s, close %v; want 200 on a kept-alive connection", i, resp.Status, resp.Close)
		}
	}
}

// TestGRPCHandshakeDeadline: a connection to the gRPC port that never sends
// the HTTP/2 preface is closed at the handshake deadline, not after
// grpc-go's default 120 s.
func TestGRPCHandshakeDeadline(t *testing.T) {
	srv := shedServer(t, Config{GRPCHandshakeTimeout: 300 * time.Millisecond})
	c := dialRaw(t, srv.GRPCAddr())
	start := time.Now()
	readUntilClosed(t, c, 5*time.Second) // the server's SETTINGS, then EOF
	t.Logf("closed after %v (handshake deadline 300ms)", time.Since(start).Round(time.Millisecond))
}

// TestDashboardStreamOutlivesDeadlines: the dashboard's event stream goes on
// past the read and write deadlines of a request.
func TestDashboardStreamOutlivesDeadlines(t *testing.T) {
	const deadline = 300 * time.Millisecond
	srv := shedServer(t, Config{HTTPReadTimeout: deadline, HTTPWriteTimeout: deadline})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+srv.HTTPAddr()+"/ui/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start := time.Now()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	events := 0
	for events < 3 && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: {") {
			events++
		}
	}
	if events < 3 {
		t.Fatalf("the stream ended after %d events and %v: %v", events, time.Since(start), sc.Err())
	}
	if d := time.Since(start); d < 2*deadline {
		t.Fatalf("3 events within %v: they do not span the deadlines", d)
	}
}

// TestConnCapShedsIdleFirst fills the cap with hostile connections — POSTs
// withholding their bodies (serving), HTTP connections that send nothing
// and gRPC ones that never send the preface — and checks that a new
// client's /healthz and gRPC health check get in, the idle connections
// being closed for them and the serving ones kept. The deadlines are far
// off: the cap alone makes the room.
func TestConnCapShedsIdleFirst(t *testing.T) {
	const (
		maxConns = 12
		busy     = 4
	)
	srv := shedServer(t, Config{MaxConns: maxConns, HTTPReadTimeout: time.Minute, GRPCHandshakeTimeout: time.Minute})
	m := srv.Metrics()
	var posts []net.Conn
	for range busy {
		c := dialRaw(t, srv.HTTPAddr())
		withheldPOST(t, c, "/v1/check")
		posts = append(posts, c)
	}
	waitFor(t, func() bool { return srv.busyConns() == busy })
	for i := range maxConns - busy {
		addr := srv.HTTPAddr()
		if i%2 == 1 {
			addr = srv.GRPCAddr()
		}
		dialRaw(t, addr)
	}
	waitFor(t, func() bool {
		return metricValue(t, m, "floodgate_connections_open", "listener", "http") == maxConns/2+busy/2
	})
	waitFor(t, func() bool {
		return metricValue(t, m, "floodgate_connections_open", "listener", "grpc") == maxConns/2-busy/2
	})

	tr := &http.Transport{} // its connection stays open: the gRPC client's must make room again
	defer tr.CloseIdleConnections()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	resp, err := hc.Get("http://" + srv.HTTPAddr() + "/healthz")
	if err != nil {
		t.Fatalf("/healthz with the cap full: %v", err)
	}
	io.Copy(io.Discard, resp.Body) // read to its end, the connection stays open
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s", resp.Status)
	}

	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health check with the cap full: %v %v", h, err)
	}

	for i, c := range posts {
		if !stillOpen(c, 50*time.Millisecond) {
			t.Errorf("withheld POST %d: closed to make room, but it was being served", i)
		}
	}
	if open := metricValue(t, m, "floodgate_connections_open", "listener", "http") + metricValue(t, m, "floodgate_connections_open", "listener", "grpc"); open > maxConns {
		t.Errorf("%v connections open, over the cap of %d", open, maxConns)
	}
	if n := metricValue(t, m, "floodgate_connections_shed_total", "reason", "idle"); n < 2 {
		t.Errorf("%v idle connections shed, want at least 2 (one per new client)", n)
	}
	if n := metricValue(t, m, "floodgate_connections_limit"); n != maxConns {
		t.Errorf("floodgate_connections_limit %v, want %d", n, maxConns)
	}
}

// TestConnCapRefusesWhenAllServing: with every connection serving a request,
// a new one is closed at once rather than left waiting in the accept queue.
func TestConnCapRefusesWhenAllServing(t *testing.T) {
	const maxConns = 3
	srv := shedServer(t, Config{MaxConns: maxConns, HTTPReadTimeout: time.Minute})
	for range maxConns {
		withheldPOST(t, dialRaw(t, srv.HTTPAddr()), "/v1/check")
	}
	waitFor(t, func() bool { return srv.busyConns() == maxConns })
	readUntilClosed(t, dialRaw(t, srv.GRPCAddr()), 5*time.Second)
	if n := metricValue(t, srv.Metrics(), "floodgate_connections_shed_total", "listener", "grpc", "reason", "refused"); n != 1 {
		t.Fatalf("refused gRPC connections: %v, want 1", n)
	}
}

// busyConns counts the open connections serving a request.
func (s *Server) busyConns() int { return s.conns.Busy() }

// TestConnBusyTracking: the cap knows which connections are serving, over
// TCP and over TLS: an HTTP request from its first byte to its answer
// (http.Server.ConnState), a gRPC call while it lasts (the interceptors,
// through the peer address).
func TestConnBusyTracking(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "tls"}[useTLS], func(t *testing.T) {
			c := Config{HTTPReadTimeout: time.Minute}
			creds := insecure.NewCredentials()
			dial := func(addr string) net.Conn { return dialRaw(t, addr) }
			if useTLS {
				var pool *x509.CertPool
				c.TLSCertFile, c.TLSKeyFile, pool = selfSigned(t)
				conf := &tls.Config{RootCAs: pool, ServerName: "localhost"}
				creds = credentials.NewTLS(conf)
				dial = func(addr string) net.Conn {
					tc := tls.Client(dialRaw(t, addr), conf)
					if err := tc.Handshake(); err != nil {
						t.Fatal(err)
					}
					return tc
				}
			}
			srv := shedServer(t, c)
			withheldPOST(t, dial(srv.HTTPAddr()), "/v1/check")
			waitFor(t, func() bool { return srv.busyConns() == 1 })

			conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			health := healthpb.NewHealthClient(conn)
			if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatal(err)
			}
			if n := srv.busyConns(); n != 1 {
				t.Fatalf("%d connections serving after a finished call, want 1", n)
			}
			wctx, stopWatch := context.WithCancel(ctx)
			w, err := health.Watch(wctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Recv(); err != nil {
				t.Fatal(err)
			}
			if n := srv.busyConns(); n != 2 {
				t.Fatalf("%d connections serving during a Watch, want 2", n)
			}
			stopWatch()
			waitFor(t, func() bool { return srv.busyConns() == 1 })
		})
	}
}

// selfSigned writes a certificate for localhost and its key to files, and
// returns their paths and a pool trusting the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// emfileListener fails its next Accept with EMFILE when fail is set, as a
// process out of descriptors does.
type emfileListener struct {
	net.Listener
	fail chan struct{}
}

func (l *emfileListener) Accept() (net.Conn, error) {
	select {
	case <-l.fail:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	default:
		return l.Listener.Accept()
	}
}

// TestAcceptEMFILEShedsIdle: when accept runs out of descriptors anyway, the
// idlest connection is closed to free one, and the error is returned for
// the server's accept loop to back off.
func TestAcceptEMFILEShedsIdle(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	m := NewMetrics()
	fl := &emfileListener{Listener: tcp, fail: make(chan struct{}, 1)}
	ln := connlimit.New(m.Registry, 10, "http").Wrap(fl, "http")
	client := dialRaw(t, tcp.Addr().String())
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fl.fail <- struct{}{}
	if _, err := ln.Accept(); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("Accept: %v, want EMFILE", err)
	}
	readUntilClosed(t, client, 5*time.Second)
	if n := metricValue(t, m, "floodgate_connections_shed_total", "reason", "descriptors"); n != 1 {
		t.Fatalf("%v connections shed for descriptors, want 1", n)
	}
	if n := metricValue(t, m, "floodgate_connections_open"); n != 0 {
		t.Fatalf("%v connections open, want 0", n)
	}
}

// TestConnCap: the default cap keeps headroom below the descriptor limit.
func TestConnCap(t *testing.T) {
	for _, tc := range []struct {
		soft  uint64
		procs int
		want  int
	}{
		{1024, 2, 812},
		{2048, 2, 1708},
		{65536, 2, 57260},
		{65536, 64, 56640},
		{256, 2, 140},
		{64, 2, 16}, // a quarter of the limit at least
		{1, 1, 1},
		{1 << 40, 2, 0}, // unlimited: no cap
	} {
		if got := connlimit.Cap(tc.soft, tc.procs); got != tc.want {
			t.Errorf("Cap(%d, %d) = %d, want %d", tc.soft, tc.procs, got, tc.want)
		}
	}
}
