package testenv_test

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestRedisTLS starts a TLS-only server that requires client certificates:
// Do speaks TLS, a go-redis client with the CA and the client certificate
// gets through, and neither plain TCP nor TLS without a client certificate
// does.
func TestRedisTLS(t *testing.T) {
	r := testenv.NewRedis(t, testenv.WithTLS(nil, true))
	if r.TLS == nil || !r.TLS.AuthClients {
		t.Fatalf("Redis.TLS = %+v, want the TLS set-up with AuthClients", r.TLS)
	}
	ctx := ctxTimeout(t, 10*time.Second)
	if v, err := r.Do(ctx, "PING"); err != nil || v != "PONG" {
		t.Fatalf("Do(PING) = %v, %v; want PONG", v, err)
	}
	conf, err := r.TLS.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	good := redis.NewClient(&redis.Options{Addr: r.Addr, TLSConfig: conf, MaxRetries: -1})
	defer good.Close()
	if err := good.Set(ctx, "tls:k", "v", 0).Err(); err != nil {
		t.Fatalf("SET over TLS with a client certificate: %v", err)
	}

	plain := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, ReadTimeout: time.Second})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("PING over plain TCP to a TLS-only server succeeded")
	}

	noCert := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: r.TLS.CA.Pool(), MinVersion: tls.VersionTLS12}})
	defer noCert.Close()
	if err := noCert.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("PING without a client certificate: %v, want a refusal about the certificate", err)
	}

	// Restart keeps the TLS set-up.
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	if v, err := r.Do(ctx, "PING"); err != nil || v != "PONG" {
		t.Fatalf("Do(PING) after Restart = %v, %v; want PONG", v, err)
	}
}
