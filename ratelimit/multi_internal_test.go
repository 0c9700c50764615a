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
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestHashSlot compares backend.KeySlot and backend.Redis.Slot with the Cluster's CLUSTER KEYSLOT, on the
// keys floodgate builds (escaped braces included) and on raw keys with every
// hash-tag corner.
func TestHashSlot(t *testing.T) {
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.SharedCluster(t).Addrs})
	t.Cleanup(func() { cc.Close() })
	b, err := backend.NewRedisE(cc, backend.WithPrefix("fg"))
	if err != nil {
		t.Fatal(err)
	}
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
		raw = append(raw, b.Key(tag, "d1234"))
		if got, want := b.Slot(tag), backend.KeySlot(b.Key(tag, "")); got != want {
			t.Errorf("Slot(%q) = %d, KeySlot of its key %d", tag, got, want)
		}
	}
	if !b.Cluster() {
		t.Error("a backend on a go-redis ClusterClient does not report Cluster()")
	}
	for _, k := range raw {
		want, err := cc.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := backend.KeySlot(k); int64(got) != want {
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
	call(cluster, "user:98", "user:2964") // one slot: one script
	if isCluster(cluster) {
		t.Fatal("a call within one slot marked the backend as a Cluster")
	}
	call(cluster, "alice", "bob")
	if !isCluster(cluster) {
		t.Fatal("a call across slots did not mark the backend as a Cluster")
	}
	call(cluster, "alice", "bob", "user:98")

	standalone := backendtest.Redis(t, nil)
	call(standalone, "alice", "bob")
	if isCluster(standalone) {
		t.Fatal("a standalone Redis was marked as a Cluster")
	}
}
