package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
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

// TestEnvoyCompatRedisTLSClusterAndSentinel: REDIS_TLS with a standalone
// server, with REDIS_TYPE=cluster and with REDIS_TYPE=sentinel, envoy's
// REDIS_TLS_CACERT and REDIS_TLS_CLIENT_CERT/KEY, against servers that
// speak only TLS (to clients, between nodes, Sentinel to Redis) and require
// client certificates (envoy's own tests put stunnel in front of plain
// servers; f2fb157, src/redis/driver_impl.go gives one TLS configuration to
// the Cluster's nodes, the Sentinels and the master). With the Sentinel,
// REDIS_SENTINEL_AUTH=user:password authenticates to it as that ACL user, as
// envoy's createDialer does: the Sentinel lists floodgate's connection
// under the user.
func TestEnvoyCompatRedisTLSClusterAndSentinel(t *testing.T) {
	ca, err := testenv.NewCA(t.TempDir(), "redis-ca")
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue("floodgate-redis", testenv.CertOptions{Client: true})
	if err != nil {
		t.Fatal(err)
	}
	tlsEnv := []string{"REDIS_TLS=true", "REDIS_TLS_CACERT=" + ca.CertFile,
		"REDIS_TLS_CLIENT_CERT=" + client.CertFile, "REDIS_TLS_CLIENT_KEY=" + client.KeyFile}
	const cfg = "domain: tls\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"
	// counted asks twice for each of several users (keys on several
	// Cluster slots): the second answer shows the first was counted in
	// Redis.
	counted := func(t *testing.T, s *fgServer) {
		avoidWindowEdge(time.Hour, 5*time.Second)
		for _, u := range []string{"a", "b", "c", "d", "e"} {
			for i := range 2 {
				checkResponse(t, "user "+u, s.mustRL(request("tls", entries("user", u))), ok(10, hour, uint32(9-i)))
			}
		}
	}

	t.Run("standalone", func(t *testing.T) {
		r := testenv.NewRedis(t, testenv.WithTLS(ca, true))
		counted(t, startEnvoyCompat(t, r, envoyRuntime(t, cfg), tlsEnv...))
	})

	t.Run("cluster", func(t *testing.T) {
		c := testenv.NewClusterWith(t, testenv.WithNodeOptions(testenv.WithTLS(ca, true)))
		s := startEnvoyCompat(t, c.Nodes[0], envoyRuntime(t, cfg), append(tlsEnv,
			"REDIS_TYPE=cluster", "REDIS_URL="+strings.Join(c.Addrs, ","))...)
		counted(t, s)
	})

	t.Run("sentinel", func(t *testing.T) {
		sn := testenv.NewSentinelWith(t, testenv.WithSentinelNodeOptions(testenv.WithTLS(ca, true)),
			testenv.WithSentinelConf("user envoy on >s3cret ~* &* +@all"))
		s := startEnvoyCompat(t, sn.Master, envoyRuntime(t, cfg), append(tlsEnv,
			"REDIS_TYPE=sentinel", "REDIS_URL="+sn.MasterName+","+strings.Join(sn.SentinelAddrs, ","),
			"REDIS_SENTINEL_AUTH=envoy:s3cret")...)
		counted(t, s)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		list, err := sn.Sentinels[0].Do(ctx, "CLIENT", "LIST")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(fmt.Sprint(list), " user=envoy ") {
			t.Errorf("the Sentinel lists no connection of user envoy:\n%s", list)
		}
		if strings.Contains(s.Logs(), "s3cret") {
			t.Error("the Sentinel password is in the log")
		}
	})
}

// TestEnvoyCompatRedisAuth: REDIS_AUTH as envoyproxy/ratelimit reads it
// (f2fb157, src/redis/driver_impl.go createDialer): a password for a server
// with requirepass, and user:password for an ACL user (Redis lists
// floodgate's connections under that user); the log does not show the
// password.
func TestEnvoyCompatRedisAuth(t *testing.T) {
	const cfg = "domain: auth\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"
	r := testenv.NewRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Passwords set once the server runs: testenv's own probes speak
	// without one.
	for _, cmd := range [][]string{
		{"ACL", "SETUSER", "envoy", "on", ">pw-envoy", "~*", "&*", "+@all"},
		{"CONFIG", "SET", "requirepass", "pw-default"},
	} {
		if _, err := r.Do(ctx, cmd...); err != nil {
			t.Fatal(err)
		}
	}
	admin := redis.NewClient(&redis.Options{Addr: r.Addr, Password: "pw-default"})
	defer admin.Close()
	for _, c := range []struct{ name, auth, user, pass string }{
		{"password", "pw-default", "default", "pw-default"},
		{"ACL user", "envoy:pw-envoy", "envoy", "pw-envoy"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := startEnvoyCompat(t, r, envoyRuntime(t, cfg), "REDIS_AUTH="+c.auth)
			avoidWindowEdge(time.Hour, 5*time.Second)
			for i := range 2 {
				checkResponse(t, c.name, s.mustRL(request("auth", entries("user", c.name))), ok(10, hour, uint32(9-i)))
			}
			// The answers above need Redis: the password was taken. An
			// ACL user shows in CLIENT LIST (the default user is the
			// admin client's too).
			list, err := admin.ClientList(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if c.user != "default" && !strings.Contains(list, " user="+c.user+" ") {
				t.Errorf("Redis lists no connection of user %s:\n%s", c.user, list)
			}
			if strings.Contains(s.Logs(), c.pass) {
				t.Error("the password is in the log")
			}
		})
	}
}
