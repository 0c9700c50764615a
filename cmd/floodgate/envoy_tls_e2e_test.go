package main

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestEnvoyCompatGRPCServerTLS: envoy's GRPC_SERVER_USE_TLS serves TLS on
// the gRPC API only, with GRPC_SERVER_TLS_CERT and _KEY, client
// certificates from GRPC_CLIENT_TLS_CACERT's CA with GRPC_CLIENT_TLS_SAN;
// the HTTP API stays plaintext; a certificate replaced on disk is served
// within seconds, and the old CA no longer verifies it. These are
// envoyproxy/ratelimit's (f2fb157) test/integration Test_mTLS and
// TestReloadGRPCServerCerts.
func TestEnvoyCompatGRPCServerTLS(t *testing.T) {
	r := testenv.NewRedis(t)
	dir := t.TempDir()
	mustCA, mustIssue := certMakers(t, dir)
	serverCA, newCA, clientCA := mustCA("server-ca"), mustCA("new-server-ca"), mustCA("client-ca")
	srv := mustIssue(serverCA, "ratelimit", testenv.Localhost())
	rotated := mustIssue(newCA, "ratelimit-new", testenv.Localhost())
	client := mustIssue(clientCA, "envoy", testenv.CertOptions{Client: true, DNSNames: []string{"localhost"}})

	s := startEnvoyCompat(t, r, envoyRuntime(t, envoyTestConfig),
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT="+srv.CertFile, "GRPC_SERVER_TLS_KEY="+srv.KeyFile,
		"GRPC_CLIENT_TLS_CACERT="+clientCA.CertFile, "GRPC_CLIENT_TLS_SAN=localhost")

	clientCert, err := client.Load()
	if err != nil {
		t.Fatal(err)
	}
	call := func(ca *testenv.CA, certs ...tls.Certificate) (*rls.RateLimitResponse, error) {
		conf := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12, Certificates: certs}
		conn, err := grpc.NewClient(s.GRPC, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return rls.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request("envoy-compat", entries("per_minute", "tls")))
	}
	// Test_mTLS: a client with a certificate of the client CA is served.
	if resp, err := call(serverCA, clientCert); err != nil || resp.GetOverallCode() != codeOK {
		t.Fatalf("gRPC over mutual TLS: %v, %v", resp, err)
	}
	if _, err := call(serverCA); err == nil {
		t.Error("a gRPC client without a certificate was served")
	}
	if _, err := s.rl(request("envoy-compat", entries("per_minute", "tls"))); err == nil {
		t.Error("plaintext gRPC was served with GRPC_SERVER_USE_TLS=true")
	}
	// The HTTP API stays plaintext, as envoy's.
	resp, err := http.Get("http://" + s.HTTP + "/healthcheck")
	if err != nil {
		t.Fatalf("plaintext /healthcheck: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "OK" {
		t.Errorf("plaintext /healthcheck: %d %q, want 200 \"OK\"", resp.StatusCode, body)
	}

	// TestReloadGRPCServerCerts: the files replaced (renamed over), the new
	// certificate is served within 10 s; the old CA no longer verifies.
	dial := func(ca *testenv.CA) error {
		c, err := tls.Dial("tcp", s.GRPC, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12,
			Certificates: []tls.Certificate{clientCert}, NextProtos: []string{"h2"}})
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(newCA); err == nil {
		t.Fatal("the new CA verified the certificate before it was replaced")
	}
	if err := os.Rename(rotated.CertFile, srv.CertFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(rotated.KeyFile, srv.KeyFile); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for dial(newCA) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the replaced certificate is not served after 10s: %v", dial(newCA))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := dial(serverCA); err == nil {
		t.Error("the old CA still verifies the served certificate after the replacement")
	}
}
