package main

import (
	"context"
	"crypto/tls"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// certMakers returns makers of CAs in dir and of key pairs they issue,
// failing t on an error.
func certMakers(t *testing.T, dir string) (func(name string) *testenv.CA, func(ca *testenv.CA, name string, o testenv.CertOptions) testenv.KeyPair) {
	mustCA := func(name string) *testenv.CA {
		ca, err := testenv.NewCA(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	mustIssue := func(ca *testenv.CA, name string, o testenv.CertOptions) testenv.KeyPair {
		kp, err := ca.Issue(name, o)
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	return mustCA, mustIssue
}

// TestServeTLS runs `floodgate serve` with TLS everywhere: to a TLS-only
// redis-server that requires client certificates (--redis-tls-ca,
// --redis-tls-cert, --redis-tls-key), and mutual TLS on its own APIs
// (--tls-cert, --tls-key, --tls-client-ca, --tls-client-san). An Envoy with
// the right certificate gets decisions; one without, or with another SAN,
// is refused; a wrong Redis CA stops the start with an error naming it.
func TestServeTLS(t *testing.T) {
	r := testenv.NewRedis(t, testenv.WithTLS(nil, true))
	dir := t.TempDir()
	mustCA, mustIssue := certMakers(t, dir)
	serverCA, clientCA := mustCA("server-ca"), mustCA("client-ca")
	srvCert := mustIssue(serverCA, "floodgate", testenv.Localhost())
	envoy := mustIssue(clientCA, "envoy", testenv.CertOptions{Client: true, DNSNames: []string{"envoy.local"}})
	other := mustIssue(clientCA, "other", testenv.CertOptions{Client: true, DNSNames: []string{"other.local"}})
	redisClient := mustIssue(r.TLS.CA, "floodgate-redis", testenv.CertOptions{Client: true})

	cfg := filepath.Join(t.TempDir(), "api.yaml")
	writeConfig(t, cfg, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	common := []string{"--config", cfg, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--log-format", "json",
		"--redis", "rediss://" + r.Addr, "--redis-prefix", uniquePrefix(t),
		"--redis-tls-cert", redisClient.CertFile, "--redis-tls-key", redisClient.KeyFile,
		"--tls-cert", srvCert.CertFile, "--tls-key", srvCert.KeyFile,
		"--tls-client-ca", clientCA.CertFile, "--tls-client-san", "envoy.local"}
	s := startServerWith(t, serveOpts{bare: true}, "", append(common, "--redis-tls-ca", r.TLS.CA.CertFile)...)

	call := func(kp testenv.KeyPair) (*rls.RateLimitResponse, error) {
		conf := &tls.Config{RootCAs: serverCA.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
		if kp.CertFile != "" {
			c, err := kp.Load()
			if err != nil {
				t.Fatal(err)
			}
			conf.Certificates = []tls.Certificate{c}
		}
		conn, err := grpc.NewClient(s.GRPC, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return rls.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request("api", entries("user", "alice")))
	}
	resp, err := call(envoy)
	if err != nil {
		t.Fatalf("Envoy with its certificate: %v", err)
	}
	if resp.OverallCode != rls.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("decision over TLS: %v", resp)
	}
	if _, err := call(testenv.KeyPair{}); err == nil {
		t.Fatal("a client without a certificate got a decision")
	}
	if _, err := call(other); err == nil {
		t.Fatal("a client certificate without the SAN envoy.local got a decision")
	}

	// A Redis CA that did not sign the server's certificate: no start.
	wrong := mustCA("wrong-ca")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, floodgateBinary(t), append([]string{"serve"}, append(common, "--redis-tls-ca", wrong.CertFile)...)...).CombinedOutput()
	if err == nil {
		t.Fatalf("floodgate serve started with a wrong Redis CA; output:\n%s", out)
	}
	if !strings.Contains(string(out), "signed by no CA in "+wrong.CertFile) {
		t.Fatalf("the start-up error does not name the CA file; output:\n%s", out)
	}
}
