package testenv_test

import (
	"context"
	"crypto/tls"
	"strconv"
	"strings"
	"sync/atomic"
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

// TestClusterTLS starts a Cluster whose nodes speak only TLS, to clients and
// on the cluster bus, certificates from one CA: it forms (StartClusterWith
// waits for cluster_state:ok through its TLS-aware helpers), and a go-redis
// Cluster client with the CA and a client certificate reaches every master,
// by the TLS ports the nodes report.
func TestClusterTLS(t *testing.T) {
	ca, err := testenv.NewCA(t.TempDir(), "cluster-ca")
	if err != nil {
		t.Fatal(err)
	}
	c := testenv.NewClusterWith(t, testenv.WithNodeOptions(testenv.WithTLS(ca, true)))
	conf, err := c.Nodes[0].TLS.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 20*time.Second)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, TLSConfig: conf})
	defer cc.Close()
	for i := range 30 {
		if err := cc.Set(ctx, "tls:{"+strconv.Itoa(i)+"}", "v", 0).Err(); err != nil {
			t.Fatalf("SET over TLS on the Cluster: %v", err)
		}
	}
	var masters atomic.Int32 // ForEachMaster calls fn concurrently
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		masters.Add(1)
		return m.Ping(ctx).Err()
	}); err != nil || masters.Load() != 3 {
		t.Fatalf("PING every master: %d masters, %v; want 3, nil", masters.Load(), err)
	}
	plain := redis.NewClient(&redis.Options{Addr: c.Addrs[0], MaxRetries: -1, ReadTimeout: time.Second})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("PING over plain TCP to a TLS-only Cluster node succeeded")
	}
}

// TestSentinelTLSAndACL starts a Sentinel group whose master, replica and
// Sentinel speak only TLS, with an ACL user on the Sentinel: the group
// forms (replication over TLS, the Sentinel monitoring over TLS), a
// go-redis failover client authenticating to the Sentinel as that user
// reaches the master, and Failover still works.
func TestSentinelTLSAndACL(t *testing.T) {
	ca, err := testenv.NewCA(t.TempDir(), "sentinel-ca")
	if err != nil {
		t.Fatal(err)
	}
	s := testenv.NewSentinelWith(t, testenv.WithSentinelNodeOptions(testenv.WithTLS(ca, true)),
		testenv.WithSentinelConf("user app on >s3cret ~* &* +@all"))
	conf, err := s.Master.TLS.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 60*time.Second)
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs,
		SentinelUsername: "app", SentinelPassword: "s3cret", TLSConfig: conf})
	defer fc.Close()
	if err := fc.Set(ctx, "tls:k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the TLS Sentinel as an ACL user: %v", err)
	}
	wrong := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs,
		SentinelUsername: "app", SentinelPassword: "wrong", TLSConfig: conf, MaxRetries: -1})
	defer wrong.Close()
	if err := wrong.Ping(ctx).Err(); err == nil {
		t.Fatal("the Sentinel accepted a wrong password for its ACL user")
	}
	addr, err := s.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if addr != s.Replica.Addr {
		t.Fatalf("promoted %s, want the replica %s", addr, s.Replica.Addr)
	}
}
