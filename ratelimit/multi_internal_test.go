package ratelimit

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
)

// TestHashSlot compares redisstore.KeySlot and redisstore.Store.Slot with the Cluster's CLUSTER KEYSLOT, on the
// keys floodgate builds (escaped braces included) and on raw keys with every
// hash-tag corner.
func TestHashSlot(t *testing.T) {
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.SharedCluster(t).Addrs})
	t.Cleanup(func() { cc.Close() })
	b, err := backend.NewRedis(cc, backend.WithPrefix("fg"))
	if err != nil {
		t.Fatal(err)
	}
	bs := unwrap.Redis(b)
	raw := []string{"foo", "{}", "foo{}bar", "foo{bar", "foo}bar{", "{a}{b}", "}{a}", "{{a}}", "", "a{b}c"}
	tags := []string{"a", "user:42", "a}b{c", "{x}", "%7B", "100%", "é", strings.Repeat("z", backend.MaxKeyLen)}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		k := make([]byte, 1+rng.IntN(20))
		for i := range k {
			k[i] = "ab{}%:x"[rng.IntN(7)]
		}
		tags = append(tags, string(k))
	}
	for _, tag := range tags {
		raw = append(raw, bs.Key(tag, "d1234"))
		if got, want := bs.Slot(tag), redisstore.KeySlot(bs.Key(tag, "")); got != want {
			t.Errorf("Slot(%q) = %d, KeySlot of its key %d", tag, got, want)
		}
	}
	if !bs.Cluster() {
		t.Error("a backend on a go-redis ClusterClient does not report Cluster()")
	}
	for _, k := range raw {
		want, err := cc.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redisstore.KeySlot(k); int64(got) != want {
			t.Errorf("KeySlot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}

// TestAllowAllMarksCluster checks that only a call across slots on a Cluster
// switches a backend to the grouped path.
func TestAllowAllMarksCluster(t *testing.T) {
	ctx := context.Background()
	call := func(b backend.Backend, keys ...string) {
		t.Helper()
		l, err := New(b, FixedWindow{Limit: 5, Window: time.Minute}, TokenBucket{Capacity: 5, Refill: 1, Every: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		reqs := make([]Request, len(keys))
		for i, k := range keys {
			reqs[i] = Request{Limiter: l, Key: k, N: 1}
		}
		res := make([]Result, len(reqs))
		if ok, err := AllowAll(ctx, reqs, res); !ok || err != nil {
			t.Fatalf("%v: %v, %v, %+v", keys, ok, err, res)
		}
	}
	cluster := backendtest.Cluster(t, nil)
	clusters := unwrap.Redis(cluster)
	call(cluster, "user:98", "user:2964") // one slot: one script
	if isCluster(clusters) {
		t.Fatal("a call within one slot marked the backend as a Cluster")
	}
	call(cluster, "alice", "bob")
	if !isCluster(clusters) {
		t.Fatal("a call across slots did not mark the backend as a Cluster")
	}
	call(cluster, "alice", "bob", "user:98")

	standalone := backendtest.Redis(t, nil)
	call(standalone, "alice", "bob")
	if isCluster(unwrap.Redis(standalone)) {
		t.Fatal("a standalone Redis was marked as a Cluster")
	}
}
